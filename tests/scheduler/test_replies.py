"""Bounds and consistency checks of worker messages (the scheduler drops a peer that fails them)."""

from __future__ import annotations

import numpy as np
import pytest

from common import wire
from common.tree import TokenTree
from services.scheduler import replies

# tree: 0 <- root, 1 child of 0, 2 child of 0, 3 child of 1
TREE = wire.tree_to_wire(TokenTree.build(np.array([10, 11, 12, 13], np.int64), np.array([-1, 0, 0, 1], np.int32),
                                         np.zeros(4, np.float32)))


def result(accepted, bonus=5, logprobs=None) -> wire.VerifyResult:
    return wire.VerifyResult(round=1, outs={"s": wire.VerifyOut(accepted=accepted, bonus=bonus, logprobs=logprobs)})


class TestHello:
    @pytest.mark.parametrize("kw", [{"slots_total": -1}, {"slots_total": 10 ** 9}, {"max_len": -5},
                                    {"eos_ids": [-1]}, {"vocab_size": 100, "eos_ids": [100]},
                                    {"cost_ms": [(0, 1.0)]}, {"cost_ms": [(4, float("nan"))]}])
    def test_out_of_bounds_hello_refused(self, kw):
        """Negative or huge counts, out-of-vocabulary EOS ids and bad cost curves are refused."""
        assert replies.hello_problem(wire.Hello(role=wire.Role.VERIFIER, replica="x", pid=1, **{"slots_total": 8, **kw}))

    def test_normal_hello_passes(self):
        """A real verifier's Hello passes."""
        assert replies.hello_problem(wire.Hello(role=wire.Role.VERIFIER, replica="x", pid=1, slots_total=8, max_len=4096, eos_ids=[151645], cost_ms=[(1, 3.0)],
                                                vocab_size=151936)) is None

    def test_heartbeat_counts_bounded(self):
        """A heartbeat announcing negative slots is refused."""
        assert replies.heartbeat_problem(wire.Heartbeat(role=wire.Role.DRAFT, replica="x", ready=True, slots_used=-3, slots_total=8))
        assert replies.heartbeat_problem(wire.Heartbeat(role=wire.Role.DRAFT, replica="x", ready=True, slots_used=3, slots_total=8)) is None


class TestVerifyResult:
    @pytest.mark.parametrize("accepted", [[], [0], [0, 1], [0, 1, 3], [0, 2]])
    def test_paths_pass(self, accepted):
        """Root-to-leaf paths of the tree sent are accepted."""
        assert replies.verify_problem(result(accepted), {"s": TREE}, 1000) is None

    @pytest.mark.parametrize("accepted", [[4], [-1], [1], [2], [0, 2, 3], [0, 3], [10 ** 9]])
    def test_non_paths_refused(self, accepted):
        """Indices outside the tree, or not forming a path from the root, are refused (the issue's IndexError)."""
        assert "not a path" in replies.verify_problem(result(accepted), {"s": TREE}, 1000)

    def test_bonus_outside_vocab_refused(self):
        """A bonus token outside the vocabulary is refused."""
        assert "bonus" in replies.verify_problem(result([0], bonus=1000), {"s": TREE}, 1000)


class TestDraftResult:
    def test_oversized_or_out_of_vocab_tree_refused(self):
        """A tree larger than asked, or with tokens outside the vocabulary, is refused."""
        res = wire.DraftResult(round=1, trees={"s": TREE})
        assert "asked" in replies.draft_problem(res, {"s": 3}, 1000)
        assert "vocabulary" in replies.draft_problem(res, {"s": 4}, 12)
        assert replies.draft_problem(res, {"s": 4}, 1000) is None
