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
import time
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

    def free(self, seq_ids: list[str], keep: bool = True) -> None: ...


NO_PREFIX_STATS = (0, 0, 0, 0)


def prefix_stats(prefix) -> tuple[int, int, int, int]:
    """(query tokens, hit tokens, blocks used, blocks total) of a worker's PrefixCache or None."""
    if prefix is None:
        return NO_PREFIX_STATS
    return prefix.queries, prefix.hits, prefix.blocks_used, prefix.blocks_total

    def held(self) -> list[str]: ...


class WorkerLoop:
    """Serves one runner (draft or verifier) for the scheduler until ``stop()``.

    ``memory``: returns (used, total) bytes for heartbeats; ``slots_used``: KV slots in use;
    ``prefix``: (query tokens, hit tokens, blocks used, blocks total) of the prefix cache.
    """

    def __init__(self, cfg: Config, role: wire.Role, replica: str, runner: Runner, hello: wire.Hello,
                 slots_used: Callable[[], int], memory: Callable[[], tuple[int, int]], log,
                 ctx: zmq.Context | None = None, on_step: Callable[[float, bool], None] | None = None,
                 prefix: Callable[[], tuple[int, int, int, int]] = lambda: NO_PREFIX_STATS) -> None:
        self.cfg, self.role, self.replica, self.runner, self.log = cfg, role, replica, runner, log
        self.on_step = on_step  # (seconds, failed) after every step: the worker's metrics
        self.serving = False  # True while run() serves: the /readyz answer
        self.hello, self._slots_used, self._memory, self._prefix = hello, slots_used, memory, prefix
        self.ctx = ctx or zmq.Context.instance()
        sock = transport.connect_dealer(self.ctx, cfg.scheduler_address, keys_dir(cfg), role.value)
        sock.send(wire.encode(hello))
        self.pump = transport.SocketPump(self.ctx, sock, self._heartbeat, cfg.heartbeat_interval_s)
        self._stop = threading.Event()
        self.epoch = ""  # the scheduler instance this worker's KV belongs to

    def _heartbeat(self) -> list[list[bytes]]:
        used, total = self._memory()
        queries, hits, blocks_used, blocks_total = self._prefix()
        hb = wire.Heartbeat(role=self.role, replica=self.replica, ready=True, slots_used=self._slots_used(),
                            slots_total=self.hello.slots_total, memory_used=used, memory_total=total,
                            prefix_cache_queries=queries, prefix_cache_hits=hits,
                            prefix_cache_blocks_used=blocks_used, prefix_cache_blocks_total=blocks_total)
        return [[wire.encode(hb)]]

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        """Serve until ``stop()``; closes the socket on the way out."""
        self.log.info("worker connected", address=self.cfg.scheduler_address, pid=os.getpid(),
                      slots_total=self.hello.slots_total, max_len=self.hello.max_len, curve=bool(keys_dir(self.cfg)))
        if not keys_dir(self.cfg):
            self.log.warning("insecure control plane: plaintext to the scheduler (insecure_control_plane = true)")
        self.serving = True
        try:
            while not self._stop.is_set():
                try:
                    frames = self.pump.inbox.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                self._handle(frames)
        finally:
            self.serving = False
            self.pump.close()

    def alive(self) -> bool:
        """The /livez answer: the loop has not stopped and the socket's I/O thread runs."""
        return not self._stop.is_set() and self.pump.alive()

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
        start = time.perf_counter()
        try:
            result = self.runner.step(msg)
        except Exception as exc:  # the service boundary: a bad step must not kill the worker
            self._observe(start, True)
            ids = [s.seq_id for s in msg.seqs]
            self.log.error("step failed", round=msg.round, error=repr(exc)[:300], seqs=len(ids))
            self.runner.free(ids, keep=False)
            if isinstance(msg, wire.DraftStep):
                return wire.DraftResult(round=msg.round, trees={}, lost=ids, guess=msg.guess)
            return wire.VerifyResult(round=msg.round, outs={}, lost=ids)
        self._observe(start, False)
        return result

    def _observe(self, start: float, failed: bool) -> None:
        if self.on_step is not None:
            self.on_step(time.perf_counter() - start, failed)


class Built(Protocol):
    """What a worker builder returns: ``runner``, ``hello``, ``slots_used()`` and ``prefix_stats()``."""

    runner: Runner
    hello: wire.Hello

    def slots_used(self) -> int: ...

    def prefix_stats(self) -> tuple[int, int, int, int]: ...


def run_worker(args, role: wire.Role, build: Callable[[Config, str, object], Built],
               memory: Callable[[str], tuple[int, int]]) -> int:
    """Shared ``run`` of ``treespec draft`` / ``treespec verifier``.

    With ``metrics_port`` set, /livez, /readyz and /metrics are served from before the
    model loads (live, not ready) until exit. Returns 2 on a config error, 1 when the
    worker cannot start (bad model path, KV budget too small, unsupported setting, probe
    port taken: logged with the reason), 0 after SIGTERM/SIGINT.
    """
    import signal

    from common.cli_args import config_or_report
    from common.logging import route_library_logging, setup_logging
    from common.openmp_env import wait_policy
    from services.probes import ProbeServer, WorkerMetrics, default_replica
    cfg = config_or_report(args, role.value)
    if cfg is None:
        return 2
    replica = default_replica(args.replica)
    log = setup_logging(role.value, replica, cfg.log_level)
    route_library_logging()
    log.info("openmp wait policy", settings=wait_policy())  # {} = libgomp's defaults
    holder: dict[str, object] = {}  # "built", "loop": filled as they come up (read by the probes)
    metrics = WorkerMetrics(role.value, replica, lambda: _slots(holder),
                            lambda: getattr(holder.get("loop"), "serving", False), lambda: _kernels(holder))
    probes = None
    try:
        if cfg.metrics_port:
            probes = ProbeServer(cfg.host, cfg.metrics_port, metrics.registry,
                                 ready=lambda: getattr(holder.get("loop"), "serving", False),
                                 live=lambda: "loop" not in holder or holder["loop"].alive()).start()
            log.info("probes listening", host=cfg.host, port=probes.port)
        built = holder["built"] = build(cfg, replica, log)
    except (OSError, ValueError, RuntimeError, NotImplementedError) as exc:
        log.error("cannot start", error=str(exc))
        if probes is not None:
            probes.close()
        return 1
    loop = holder["loop"] = WorkerLoop(cfg, role, replica, built.runner, built.hello, built.slots_used,
                                       lambda: memory(cfg.device), log, on_step=metrics.observe_step,
                                       prefix=built.prefix_stats)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: loop.stop())
    try:
        loop.run()
    finally:
        if probes is not None:
            probes.close()
    log.info("worker stopped")
    return 0


def _slots(holder: dict) -> tuple[int, int]:
    """(KV slots used, KV slots total) of the built worker; (0, 0) while loading."""
    built = holder.get("built")
    return (built.slots_used(), built.hello.slots_total) if built is not None else (0, 0)


def _kernels(holder: dict) -> tuple[list[tuple[str, int, str]], dict[str, float]]:
    """The built worker's kernel plan: (chosen (format, rows, kernel), probe timings), the attention
    plan's (``attention_probe.AttentionPlan``) with format ``attention``; empty while loading."""
    built = holder.get("built")
    chosen, timings = [], {}
    for plan in (getattr(built, "kernel_plan", None), getattr(built, "attention_plan", None)):
        if plan is not None:
            chosen += plan.choices()
            timings.update(plan.metric_timings())
    return chosen, timings


def add_worker_args(parser) -> None:
    """Flags of ``treespec draft`` / ``treespec verifier``."""
    from common.cli_args import add_config_args
    add_config_args(parser)
    parser.add_argument("--replica", default="",
                        help="replica label in logs and metrics (default: the hostname, i.e. the container or pod)")
