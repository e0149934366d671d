"""In-process engine: the service's round driver over an in-process transport.

Used by ``treespec generate`` / ``treespec bench`` and by the lossless tests. It runs the
very :class:`RoundDriver` the scheduler runs (``rounds.py``): the driver returns the
messages to send, and instead of a ZeroMQ socket this transport hands each one to the
draft or verifier runner in this process (FIFO, as one socket per worker would deliver
them) and feeds the runner's reply back to the driver. So what is benchmarked and
tested is what is served. Torch-free itself: the runners are passed in.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Iterator, Protocol

from common import wire
from common.config import Config
from services.scheduler.core import AdmissionError, SchedulerCore
from services.scheduler.rounds import Out, RoundDriver
from services.scheduler.estimates import CostCurve
from services.scheduler.tree_policy import TreePolicy
from services.scheduler.workers import WorkerRegistry

GATEWAY = b"local-gateway"
VERIFIER = b"local-verifier"
DRAFT = b"local-draft"
NO_TIMEOUT_S = 1e9  # in process, a reply is never lost


class Runner(Protocol):
    def step(self, msg): ...

    def free(self, seq_ids: list[str]) -> None: ...


class NullLog:
    """Discards the driver's structured log events (the CLI prints its own summary)."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


@dataclass
class RoundStats:
    """Per-round timings (ms) and accepted lengths (tokens committed per sequence)."""

    draft_ms: list[float] = field(default_factory=list)
    verify_ms: list[float] = field(default_factory=list)
    committed: list[int] = field(default_factory=list)


class LocalEngine:
    """Runs the scheduler's rounds against in-process runners.

    ``cfg``: tree budget (``tree_size``: 0 = plain decoding, N, or ``auto``;
    ``max_accept_length``), ``overlap``; ``costs``: (verify, draft) CostCurves for
    ``auto``. ``verifier`` / ``draft``: runners with ``step(msg)`` and ``free(ids)``;
    they are looked up at delivery time, so a test may wrap or replace them.
    """

    def __init__(self, cfg: Config, core: SchedulerCore, verifier: Runner, draft: Runner | None,
                 costs: tuple[CostCurve, CostCurve | None] | None = None, log=None) -> None:
        self.core, self.verifier, self.draft = core, verifier, draft
        slots = core.max_running
        self.workers = WorkerRegistry(NO_TIMEOUT_S)
        self.workers.hello(VERIFIER, wire.Hello(role=wire.Role.VERIFIER, replica="local", pid=0,
                                                slots_total=slots), 0.0)
        if draft is not None:
            self.workers.hello(DRAFT, wire.Hello(role=wire.Role.DRAFT, replica="local", pid=0,
                                                 slots_total=slots), 0.0)
        policy = TreePolicy(cfg)
        if costs is not None:
            policy.set_costs(*costs)
        self.driver = RoundDriver(core, self.workers, cfg, log or NullLog(), NO_TIMEOUT_S, policy)
        self.queue: deque[Out] = deque()
        self.deltas: list[wire.TokenDelta] = []
        self.stats = RoundStats()

    @property
    def policy(self) -> TreePolicy:
        return self.driver.policy

    @property
    def tree_size(self) -> int:
        """Nodes per tree of the latest round (0 = plain decoding)."""
        return self.driver.planner.shape[0]

    def submit(self, request_id: str, prompt: list[int], params: wire.SamplingParams) -> None:
        """Queue a request; raises AdmissionError (status 400/429/503 and the reason)."""
        self._route(self.driver.submit(GATEWAY, wire.Submit(request_id=request_id, prompt=prompt, params=params)))

    def step(self) -> list[wire.TokenDelta]:
        """Run one round over the running batch (and any look-ahead step it sends);
        returns the deltas it produced."""
        self._route(self.driver.start(time.monotonic()))
        while self.queue:
            self._deliver(*self.queue.popleft())
        deltas, self.deltas = self.deltas, []
        return deltas

    def _route(self, outs: list[Out]) -> None:
        for identity, msg in outs:
            if isinstance(msg, wire.Rejected):
                raise AdmissionError(msg.status, msg.reason)
            if identity == GATEWAY:
                self.deltas.append(msg)
                if msg.tokens:
                    self.stats.committed.append(len(msg.tokens))
            else:
                self.queue.append((identity, msg))

    def _deliver(self, identity: bytes, msg: wire.Message) -> None:
        runner = self.verifier if identity == VERIFIER else self.draft
        now = time.monotonic()
        if isinstance(msg, wire.Free):
            runner.free(msg.seq_ids)
        elif isinstance(msg, wire.DraftStep):
            res = runner.step(msg)
            self.stats.draft_ms.append(res.draft_ms)
            self._route(self.driver.on_draft(identity, res, now))
        else:
            res = runner.step(msg)
            self.stats.verify_ms.append(res.verify_ms)
            self._route(self.driver.on_verify(identity, res, now))

    def abort(self, request_id: str) -> None:
        """Drop a request and free its KV slots in both runners at once."""
        self._route(self.driver.abort(request_id))
        while self.queue:
            self._deliver(*self.queue.popleft())
        self.deltas = [d for d in self.deltas if d.request_id != request_id]

    def generate(self, request_id: str, prompt: list[int], params: wire.SamplingParams) -> Iterator[wire.TokenDelta]:
        """Submit one request and run rounds until it finishes, yielding its deltas."""
        self.submit(request_id, prompt, params)
        while True:
            for d in self.step():
                if d.request_id == request_id:
                    yield d
                    if d.finish is not None:
                        return

    def timed_generate(self, request_id: str, prompt: list[int], params: wire.SamplingParams):
        """(output tokens, seconds, committed-per-round list) for one request."""
        start_round = len(self.stats.committed)
        t0 = time.perf_counter()
        out = [t for d in self.generate(request_id, prompt, params) for t in d.tokens]
        return out, time.perf_counter() - t0, self.stats.committed[start_round:]


__all__ = ["LocalEngine", "RoundStats"]
