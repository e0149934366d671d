"""The scheduler's event loop: a ROUTER socket at the edge, the round driver inside.

An I/O thread (``transport.SocketPump``) owns the socket; this loop reads decoded frames
from its queue, feeds them to the pure :class:`RoundDriver` / :class:`WorkerRegistry`,
and sends what they return. Every ``STATS_INTERVAL_S`` it sends ``wire.Stats`` to each
gateway and a Heartbeat to each worker, both carrying this instance's ``epoch`` (a fresh
id per start: peers that see it change drop what they held for the previous instance).
A worker heartbeat from an unknown (never met, or dropped) worker is answered with
``ready=False``: it frees its slots and must say Hello before it is used again. The
requests of a gateway silent for ``heartbeat_timeout_s`` are aborted. Torch-free.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid

import msgspec
import zmq

from common import transport, wire
from common.config import Config
from common.control_keys import keys_dir
from services.scheduler import replies
from services.scheduler.access import refusal
from services.scheduler.core import SchedulerCore
from services.scheduler.rounds import Out, RoundDriver
from services.scheduler.stats_log import EngineStatsLog
from services.scheduler.estimates import CostCurve
from services.scheduler.workers import WorkerRegistry

STATS_INTERVAL_S = 1.0
IDLE_WAIT_S = 0.05  # longest sleep between housekeeping passes (expiry, deadlines)
STEP_TIMEOUT_FACTOR = 12  # a step reply may take this many heartbeat timeouts
STEPS = (wire.DraftStep, wire.VerifyStep)  # the messages that start a worker's step
GATEWAY_FORGET_FACTOR = 3  # stop sending Stats to a gateway silent this many heartbeat timeouts


class SchedulerLoop:
    """Binds ``cfg.scheduler_bind or cfg.scheduler_address`` and serves until ``stop()``.

    Raises zmq.ZMQError when the address cannot be bound.
    """

    def __init__(self, cfg: Config, log, ctx: zmq.Context | None = None) -> None:
        self.cfg, self.log = cfg, log
        self.ctx = ctx or zmq.Context.instance()
        self.core = SchedulerCore(cfg.max_running, cfg.max_queue, cfg.max_model_len, set())
        self.workers = WorkerRegistry(cfg.heartbeat_timeout_s)
        self.driver = RoundDriver(self.core, self.workers, cfg, log,
                                  cfg.heartbeat_timeout_s * STEP_TIMEOUT_FACTOR)
        self.gateways: dict[bytes, float] = {}  # identity -> last seen (monotonic s)
        self.stats_log = EngineStatsLog(cfg.stats_log_interval_s)  # the periodic "engine stats" line
        self.epoch = uuid.uuid4().hex[:16]
        self.vocab = 0  # the main model's vocabulary size, from the verifiers' Hello
        self.keys = keys_dir(cfg)
        sock, self.auth = transport.bind_router(self.ctx, cfg.scheduler_bind or cfg.scheduler_address, self.keys)
        self.pump = transport.SocketPump(self.ctx, sock, user_ids=bool(self.keys))
        self._stop = threading.Event()
        self.serving = False  # True while run() serves: the /readyz answer

    def stop(self) -> None:
        """Ask ``run`` to return (safe from signal handlers and other threads)."""
        self._stop.set()

    def run(self) -> None:
        """Serve until ``stop()``; closes the socket on the way out."""
        self.log.info("scheduler listening", address=self.cfg.scheduler_bind or self.cfg.scheduler_address,
                      curve=bool(self.keys), tree_size=self.cfg.tree_size, epoch=self.epoch)
        if not self.keys:
            self.log.warning("insecure control plane: plaintext, every peer trusted (insecure_control_plane = true)")
        next_stats = 0.0
        self.serving = True
        try:
            while not self._stop.is_set():
                self._receive(IDLE_WAIT_S)
                now = time.monotonic()
                self._housekeeping(now)
                if now >= next_stats:
                    self._broadcast_stats(now)
                    next_stats = now + STATS_INTERVAL_S
        finally:
            self.serving = False
            self.close()

    def close(self) -> None:
        """Close the socket (and the CURVE authenticator); ``run`` does this on its way out."""
        self.pump.close()
        if self.auth is not None:
            self.auth.stop()
            self.auth = None

    def alive(self) -> bool:
        """The /livez answer: not stopped and the socket's I/O thread runs."""
        return not self._stop.is_set() and self.pump.alive()

    def worker_counts(self) -> dict[str, int]:
        """Live workers per service (draft, verifier; 0 when none, so the series stays)."""
        return {role.value: len(self.workers.alive(role)) for role in (wire.Role.DRAFT, wire.Role.VERIFIER)}

    def _receive(self, wait_s: float) -> None:
        """Handle every frame that arrives within ``wait_s`` seconds (then drain the queue)."""
        try:
            frames = self.pump.inbox.get(timeout=wait_s)
        except queue.Empty:
            return
        while True:
            self._handle(frames, time.monotonic())
            try:
                frames = self.pump.inbox.get_nowait()
            except queue.Empty:
                return

    def _housekeeping(self, now: float) -> None:
        for w in self.workers.expire(now):
            self._send(self.driver.worker_gone(w, now, "heartbeat timeout"))
        self._send(self.driver.check_deadline(now))
        self._send(self.driver.start(now))

    def _send(self, outs: list[Out]) -> None:
        for identity, msg in outs:
            if isinstance(msg, STEPS):  # log_level=debug: scripts/message_hops.py times the messages
                self.log.debug("step sent", step=type(msg).__name__, round=msg.round, worker=identity.hex())
            self.pump.send([identity, wire.encode(msg)])

    def _handle(self, frames: list[bytes], now: float) -> None:
        """Dispatch one frame; malformed or unexpected ones are logged and dropped, and a
        message its sender's role may not send drops that sender (``access.refusal``)."""
        key_role = frames.pop().decode(errors="replace") if self.keys and frames else None
        try:
            identity, msg = transport.split_router(frames)
        except wire.WireError as exc:
            self.log.warning("malformed frame dropped", error=str(exc)[:200], frames=len(frames))
            return
        why = refusal(key_role, msg) or self._not_owner(identity, key_role, msg) or self._invalid(msg)
        if why is not None:
            self._refuse(identity, type(msg).__name__, why, now)
            return
        try:
            self._dispatch(identity, msg, now)
        except Exception as exc:  # the process boundary: one bad message costs its sender, not us
            self.log.error("message handling failed", type=type(msg).__name__, error=repr(exc)[:300])
            self._refuse(identity, type(msg).__name__, f"handling raised {type(exc).__name__}", now)

    def _invalid(self, msg: wire.Message) -> str | None:
        """Why a worker's message is out of bounds (``replies.py``): its sender is dropped."""
        if isinstance(msg, wire.Hello) and msg.role != wire.Role.GATEWAY:
            return replies.hello_problem(msg)
        if isinstance(msg, wire.Heartbeat) and msg.role in (wire.Role.DRAFT, wire.Role.VERIFIER):
            return replies.heartbeat_problem(msg)
        rnd = self.driver.current
        if isinstance(msg, wire.VerifyResult) and rnd is not None and rnd.number == msg.round:
            return replies.verify_problem(msg, rnd.trees, self.vocab)
        if isinstance(msg, wire.DraftResult):
            budget = self.driver.policy.budget  # a look-ahead (guess) tree may be larger than a round's
            size = budget.guess_shape(budget.max_nodes, 1)[0] if msg.guess else budget.max_nodes
            return replies.draft_problem(msg, {sid: size for sid in msg.trees}, self.vocab)
        return None

    def _dispatch(self, identity: bytes, msg: wire.Message, now: float) -> None:
        self.workers.touch(identity, now)
        if isinstance(msg, wire.DraftResult | wire.VerifyResult):
            self.log.debug("step result", step=type(msg).__name__, round=msg.round, worker=identity.hex(),
                           worker_ms=msg.draft_ms if isinstance(msg, wire.DraftResult) else msg.verify_ms)
        if isinstance(msg, (wire.Submit, wire.Abort)):
            self.gateways[identity] = now
        if isinstance(msg, wire.DraftResult):
            self._send(self.driver.on_draft(identity, msg, now))
        elif isinstance(msg, wire.VerifyResult):
            self._send(self.driver.on_verify(identity, msg, now))
        elif isinstance(msg, wire.Submit):
            bad = self._out_of_vocab(msg)
            self._send([(identity, wire.Rejected(request_id=msg.request_id, status=400, reason=bad))] if bad else
                       self.driver.submit(identity, msg))
        elif isinstance(msg, wire.Abort):
            self._send(self.driver.abort(msg.request_id))
        elif isinstance(msg, wire.Hello):
            self._hello(identity, msg, now)
        elif isinstance(msg, wire.Heartbeat):
            self._beat(identity, msg, now)
        else:
            self.log.warning("unexpected message dropped", type=type(msg).__name__)

    def _out_of_vocab(self, msg: wire.Submit) -> str | None:
        """A 400 reason when the prompt or stop_token_ids hold an id outside the vocabulary."""
        limit = self.vocab or replies.MAX_TOKEN_ID
        for name, ids in (("prompt", msg.prompt), ("stop_token_ids", msg.params.stop_token_ids)):
            bad = next((t for t in ids if not 0 <= t < limit), None)
            if bad is not None:
                return f"{name} holds token id {bad} outside the vocabulary 0..{limit - 1}"
        return None

    def _beat(self, identity: bytes, hb: wire.Heartbeat, now: float) -> None:
        """A worker's heartbeat updates its record; an unknown worker is asked to say Hello."""
        if hb.role not in (wire.Role.DRAFT, wire.Role.VERIFIER):
            self.gateways[identity] = now
        elif self.workers.heartbeat(identity, hb, now) is None:
            self._send([(identity, self._my_beat(ready=False))])

    def _my_beat(self, ready: bool = True) -> wire.Heartbeat:
        return wire.Heartbeat(role=None, replica="scheduler", ready=ready, epoch=self.epoch)

    def _not_owner(self, identity: bytes, key_role: str | None, msg: wire.Message) -> str | None:
        """An Abort of a request another gateway submitted (admin keys may abort any)."""
        if not isinstance(msg, wire.Abort) or key_role == "admin":
            return None
        owner = self.driver.owners.get(msg.request_id)
        return None if owner in (None, identity) else "a gateway may abort only its own requests"

    def _refuse(self, identity: bytes, what: str, why: str, now: float) -> None:
        """Drop the message and its sender (a worker's sequences are re-placed)."""
        self.log.warning("message refused, peer dropped", peer=identity.hex()[:16], type=what, reason=why)
        self.gateways.pop(identity, None)
        w = self.workers.drop(identity.hex())
        if w is not None:
            self._send(self.driver.worker_gone(w, now, f"refused: {why}"))

    def _hello(self, identity: bytes, msg: wire.Hello, now: float) -> None:
        if msg.role == wire.Role.GATEWAY:
            self.gateways[identity] = now
            self._send([(identity, self._stats())])
            return
        w, old = self.workers.hello(identity, msg, now)
        self._send([(identity, self._my_beat())])  # tells it this instance's epoch
        if old is not None:
            self._send(self.driver.worker_gone(old, now, "said hello again (restarted)"))
        self.driver.had_draft |= msg.role == wire.Role.DRAFT
        if msg.role == wire.Role.VERIFIER and msg.vocab_size:
            self.vocab = msg.vocab_size
        if msg.role == wire.Role.VERIFIER and msg.eos_ids:
            self.core.eos_ids = frozenset(msg.eos_ids)
        if msg.cost_ms:
            self._install_cost(msg)
        self.log.info("worker joined", worker=msg.replica, role=msg.role.value, pid=msg.pid,
                      slots_total=msg.slots_total, max_len=msg.max_len)

    def _install_cost(self, msg: wire.Hello) -> None:
        """Feed a worker's measured cost curve to the tree_size=auto policy."""
        try:
            curve = CostCurve(tuple((int(t), float(ms)) for t, ms in msg.cost_ms))
        except ValueError as exc:
            self.log.warning("ignored cost curve", worker=msg.replica, error=str(exc))
            return
        self.driver.policy.set_costs(**{"verify" if msg.role == wire.Role.VERIFIER else "draft": curve})

    def _stats(self) -> wire.Stats:
        core = self.core
        workers = self.workers.all()
        beats = [w.heartbeat or wire.Heartbeat(role=w.role, replica=w.replica, ready=True, slots_used=len(w.seqs),
                                               slots_total=w.slots_total)
                 for w in workers]
        beats = unique_replicas(beats, [w.key for w in workers])
        size = self.driver.planner.shape[0]
        ahead = self.driver.ahead
        return wire.Stats(running=len(core.running), waiting=len(core.waiting), num_drafts=core.num_drafts,
                          num_draft_tokens=core.num_draft_tokens, num_accepted_tokens=core.num_accepted,
                          accepted_per_pos=list(core.accepted_per_pos), tree_size=size, workers=beats,
                          ready=self.driver.ready(), guesses=ahead.sent, guess_hits=ahead.hits,
                          overlap=self.driver.overlap(), epoch=self.epoch,
                          plain_steps=self.driver.plain_steps, lookup_proposed=self.driver.policy.lookup.proposed,
                          lookup_accepted=self.driver.policy.lookup.accepted)

    def _broadcast_stats(self, now: float) -> None:
        """Stats to every gateway (and, every ``stats_log_interval_s`` while busy, the ``engine stats`` log
        line), the epoch heartbeat to every worker; abort the requests of gateways silent past the heartbeat
        timeout."""
        forget = self.cfg.heartbeat_timeout_s * GATEWAY_FORGET_FACTOR
        silent = {gw for gw, seen in self.gateways.items() if now - seen > self.cfg.heartbeat_timeout_s}
        for rid, gw in list(self.driver.owners.items()):
            if gw in silent:  # its client is gone or will never hear of it: free the KV now
                self._send(self.driver.fail(rid, f"the gateway was silent for more than "
                                                 f"{self.cfg.heartbeat_timeout_s:g} s; request aborted"))
        for gw, seen in list(self.gateways.items()):
            if now - seen > forget:
                del self.gateways[gw]
        stats = self._stats()
        self._send([(gw, stats) for gw in self.gateways])
        if (fields := self.stats_log.observe(now, stats, self.core.num_prompt_tokens, self.core.num_generated)):
            self.log.info("engine stats", **fields)
        beat = self._my_beat()
        self._send([(w.identity, beat) for w in self.workers.all()])


def unique_replicas(beats: list[wire.Heartbeat], keys: list[str]) -> list[wire.Heartbeat]:
    """The heartbeats with each (role, replica) label unique: when two live workers of a
    role report the same replica name (e.g. two hosts' processes both left at a default),
    each gets ``-<last 8 hex digits of its ZeroMQ identity>`` appended (ZeroMQ's
    generated identities differ in their last bytes), so /metrics keeps
    one series per worker and /health lists each."""
    seen: dict[tuple, int] = {}
    for hb in beats:
        seen[(hb.role, hb.replica)] = seen.get((hb.role, hb.replica), 0) + 1
    return [msgspec.structs.replace(hb, replica=f"{hb.replica}-{key[-8:]}") if seen[(hb.role, hb.replica)] > 1 else hb
            for hb, key in zip(beats, keys)]
