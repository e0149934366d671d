"""The I/O shell shared by draft and verifier workers. Torch-free itself.

A DEALER connects to the scheduler (``transport.SocketPump`` owns it in an I/O thread that
also sends a Heartbeat every ``heartbeat_interval_s``, even while a step computes). The
synchronous loop here says Hello, then answers each step through the runner and applies
Free. Malformed frames are logged and dropped; a step the runner cannot execute is
answered with every sequence ``lost`` (the scheduler re-prefills or fails them). A
scheduler Heartbeat with a new epoch (a restarted scheduler) or ``ready`` False (the
scheduler does not know this worker) frees every KV slot and sends Hello again.
"""

from __future__ import annotations

import os
import queue
import threading
from typing import Callable, Protocol

import zmq

from common import transport, wire
from common.config import Config
from common.control_keys import keys_dir

POLL_S = 0.1  # how often the loop checks for stop (s)
WARMUP_TOKENS = [0, 1, 2, 3]  # the tiny step every worker runs once before saying hello
WARMUP_ID = "__warmup__"


class Runner(Protocol):
    def step(self, msg): ...

    def free(self, seq_ids: list[str]) -> None: ...

    def held(self) -> list[str]: ...


class WorkerLoop:
    """Serves one runner (draft or verifier) for the scheduler until ``stop()``.

    ``memory``: returns (used, total) bytes for heartbeats; ``slots_used``: KV slots in use.
    """

    def __init__(self, cfg: Config, role: wire.Role, replica: str, runner: Runner, hello: wire.Hello,
                 slots_used: Callable[[], int], memory: Callable[[], tuple[int, int]], log,
                 ctx: zmq.Context | None = None) -> None:
        self.cfg, self.role, self.replica, self.runner, self.log = cfg, role, replica, runner, log
        self.hello, self._slots_used, self._memory = hello, slots_used, memory
        self.ctx = ctx or zmq.Context.instance()
        sock = transport.connect_dealer(self.ctx, cfg.scheduler_address, keys_dir(cfg), role.value)
        sock.send(wire.encode(hello))
        self.pump = transport.SocketPump(self.ctx, sock, self._heartbeat, cfg.heartbeat_interval_s)
        self._stop = threading.Event()
        self.epoch = ""  # the scheduler instance this worker's KV belongs to

    def _heartbeat(self) -> list[list[bytes]]:
        used, total = self._memory()
        hb = wire.Heartbeat(self.role, self.replica, True, self._slots_used(), self.hello.slots_total, used, total)
        return [[wire.encode(hb)]]

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Serve until ``stop()``; closes the socket on the way out."""
        self.log.info("worker connected", address=self.cfg.scheduler_address, pid=os.getpid(),
                      slots_total=self.hello.slots_total, max_len=self.hello.max_len, curve=bool(keys_dir(self.cfg)))
        if not keys_dir(self.cfg):
            self.log.warning("insecure control plane: plaintext to the scheduler (insecure_control_plane = true)")
        try:
            while not self._stop.is_set():
                try:
                    frames = self.pump.inbox.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                self._handle(frames)
        finally:
            self.pump.close()

    def _handle(self, frames: list[bytes]) -> None:
        try:
            if len(frames) != 1:
                raise wire.WireError(f"expected 1 frame, got {len(frames)}")
            msg = wire.decode(frames[0])
        except wire.WireError as exc:
            self.log.warning("malformed frame dropped", error=str(exc)[:200])
            return
        if isinstance(msg, wire.Free):
            for sid in msg.seq_ids:
                self.log.info("sequence freed", request_id=sid)
            self.runner.free(msg.seq_ids)
        elif isinstance(msg, (wire.DraftStep, wire.VerifyStep)) and self._accepts(msg):
            self.pump.send([wire.encode(self._step(msg))])
        elif isinstance(msg, wire.Heartbeat) and msg.role is None:
            self._scheduler_beat(msg)
        else:
            self.log.warning("unexpected message dropped", type=type(msg).__name__)

    def _scheduler_beat(self, hb: wire.Heartbeat) -> None:
        """A new scheduler instance, or one that does not know us: free all, say Hello."""
        restarted = bool(self.epoch) and hb.epoch != self.epoch
        if restarted or not hb.ready:
            held = self.runner.held()
            self.runner.free(held)
            self.log.warning("rejoining scheduler", reason="new scheduler instance" if restarted else "unknown to it",
                             epoch=hb.epoch, freed=len(held))
            self.pump.send([wire.encode(self.hello)])
        self.epoch = hb.epoch

    def _accepts(self, msg) -> bool:
        return isinstance(msg, wire.DraftStep) == (self.role == wire.Role.DRAFT)

    def _step(self, msg):
        """Run one step; on failure free and report every sequence lost."""
        for s in msg.seqs:
            if s.prefix_len == 0:  # a new (or re-placed) sequence: prefill here
                self.log.info("sequence placed", request_id=s.seq_id, prefill_tokens=len(s.new_tokens))
        try:
            return self.runner.step(msg)
        except Exception as exc:  # the service boundary: a bad step must not kill the worker
            ids = [s.seq_id for s in msg.seqs]
            self.log.error("step failed", round=msg.round, error=repr(exc)[:300], seqs=len(ids))
            self.runner.free(ids)
            if isinstance(msg, wire.DraftStep):
                return wire.DraftResult(msg.round, {}, ids, guess=msg.guess)
            return wire.VerifyResult(msg.round, {}, ids)


class Built(Protocol):
    """What a worker builder returns: ``runner``, ``hello`` and ``slots_used()``."""

    runner: Runner
    hello: wire.Hello

    def slots_used(self) -> int: ...


def run_worker(args, role: wire.Role, build: Callable[[Config, str, object], Built],
               memory: Callable[[str], tuple[int, int]]) -> int:
    """Shared ``run`` of ``treespec draft`` / ``treespec verifier``.

    Returns 2 on a config error, 1 when the worker cannot start (bad model path, KV budget
    too small, unsupported setting: logged with the reason), 0 after SIGTERM/SIGINT.
    """
    import signal

    from common.cli_args import config_or_report
    from common.logging import setup_logging
    cfg = config_or_report(args, role.value)
    if cfg is None:
        return 2
    replica = args.replica or str(os.getpid())
    log = setup_logging(role.value, replica, cfg.log_level)
    try:
        built = build(cfg, replica, log)
    except (OSError, ValueError, RuntimeError, NotImplementedError) as exc:
        log.error("cannot start", error=str(exc))
        return 1
    loop = WorkerLoop(cfg, role, replica, built.runner, built.hello, built.slots_used,
                      lambda: memory(cfg.device), log)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: loop.stop())
    loop.run()
    log.info("worker stopped")
    return 0


def add_worker_args(parser) -> None:
    """Flags of ``treespec draft`` / ``treespec verifier``."""
    from common.cli_args import add_config_args
    add_config_args(parser)
    parser.add_argument("--replica", default="", help="replica label in logs and stats (default: the pid)")
