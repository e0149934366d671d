"""In-process engine: the scheduler core driving draft and verifier runners directly.

Used by ``treespec generate`` / ``treespec bench`` and by tests; the multi-process
service runs the very same round through ZeroMQ (``loop.py``). Torch-free itself: the
runners are passed in.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator, Protocol


from common import wire
from common.tree import TokenTree
from services.scheduler.core import SchedulerCore
from services.scheduler.tree_policy import TreePolicy

EMPTY_TREE = wire.tree_to_wire(TokenTree.empty())


class Runner(Protocol):
    def step(self, msg): ...

    def free(self, seq_ids: list[str]) -> None: ...


@dataclass
class RoundStats:
    """Per-round timings (ms) and accepted lengths (tokens committed per sequence)."""

    draft_ms: list[float] = field(default_factory=list)
    verify_ms: list[float] = field(default_factory=list)
    committed: list[int] = field(default_factory=list)


class LocalEngine:
    """Runs rounds for all running sequences; ``tree_size`` 0 = plain decoding."""

    def __init__(self, core: SchedulerCore, verifier: Runner, draft: Runner | None,
                 tree_size: int, max_depth: int, policy: TreePolicy | None = None) -> None:
        self.core, self.verifier, self.draft = core, verifier, draft
        self.tree_size, self.max_depth = tree_size, max_depth
        self.policy = policy  # tree_size "auto": chooses (size, depth) per round
        self.round = 0
        self.stats = RoundStats()

    def step(self) -> list[wire.TokenDelta]:
        """One draft -> verify -> commit round over the running batch."""
        self.core.admit()
        seqs = list(self.core.running.values())
        if not seqs:
            return []
        self.round += 1
        if self.policy is not None:
            self.tree_size, self.max_depth = self.policy.choose(len(seqs))
        trees = self._draft(seqs)
        vstep = wire.VerifyStep(self.round, [self.core.verify_seq(s, trees[s.request_id]) for s in seqs])
        res = self.verifier.step(vstep)
        self.stats.verify_ms.append(res.verify_ms)
        for sid in res.lost:
            self.core.running[sid].reset_placement(wire.Role.VERIFIER)
        deltas = []
        for s in seqs:
            if s.request_id in res.outs:
                tree, out = trees[s.request_id], res.outs[s.request_id]
                if self.policy is not None:
                    self.policy.observe(wire.tree_from_wire(tree), out.accepted)
                deltas.append(self.core.commit(s, tree.tokens.numpy().tolist(), out))
                self.stats.committed.append(len(deltas[-1].tokens))
        self._free([d.request_id for d in deltas if d.finish is not None])
        return deltas

    def _draft(self, seqs) -> dict[str, wire.Tree]:
        trees = {s.request_id: EMPTY_TREE for s in seqs}
        if self.draft is None or self.tree_size == 0:
            return trees
        step = wire.DraftStep(self.round, [self.core.draft_seq(s, self.tree_size, self.max_depth) for s in seqs])
        res = self.draft.step(step)
        self.stats.draft_ms.append(res.draft_ms)
        for sid in res.lost:
            self.core.running[sid].reset_placement(wire.Role.DRAFT)
        trees.update(res.trees)
        return trees

    def _free(self, ids: list[str]) -> None:
        if ids:
            self.verifier.free(ids)
            if self.draft is not None:
                self.draft.free(ids)

    def abort(self, request_id: str) -> None:
        """Drop a request and free its KV slots in both runners at once."""
        if self.core.abort(request_id) is not None:
            self._free([request_id])

    def generate(self, request_id: str, prompt: list[int], params: wire.SamplingParams) -> Iterator[wire.TokenDelta]:
        """Submit one request and run rounds until it finishes, yielding its deltas."""
        self.core.submit(wire.Submit(request_id, prompt, params))
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
