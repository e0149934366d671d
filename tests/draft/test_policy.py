"""EAGLE-2 style dynamic tree expansion: frontier choice, stop rules, final selection."""

import math

import numpy as np
import pytest

from common.tree import ROOT
from services.draft.policy import TreeBuilder, TreeShape


def _lp(*probs):
    return np.log(np.array(probs))


class TestTreeShape:
    @pytest.mark.parametrize("kw", [{"size": -1, "max_depth": 2}, {"size": 4, "max_depth": 0},
                                    {"size": 4, "max_depth": 2, "topk": 0}, {"size": 4, "max_depth": 2, "width": 0}])
    def test_invalid(self, kw):
        """Negative size or non-positive depth/topk/width raise ValueError."""
        with pytest.raises(ValueError):
            TreeShape(**kw)


class TestTreeBuilder:
    def test_scores_accumulate_and_frontier_is_best_width(self):
        """Scores are cumulative log-probabilities; the frontier is the ``width`` best nodes of
        the newest level, in index order."""
        b = TreeBuilder(TreeShape(size=10, max_depth=3, width=2))
        b.add_children(ROOT, np.array([10, 11, 12]), _lp(0.2, 0.5, 0.3))
        assert b.next_frontier() == [1, 2]
        b.add_children(1, np.array([20, 21]), _lp(0.6, 0.4))
        b.add_children(2, np.array([22]), _lp(0.9))
        assert math.isclose(b.scores[3], math.log(0.5 * 0.6))
        assert b.depth[3:] == [2, 2, 2]
        assert b.next_frontier() == [3, 5]  # 0.30 and 0.27 beat 0.20

    def test_expands_only_nodes_whose_children_the_size_can_keep(self):
        """Near the size budget only ``level_width`` nodes are expanded: a 2-node tree expands its best first-level
        node alone (a chain), a 4-node tree 2 first-level nodes, then 1."""
        b = TreeBuilder(TreeShape(size=2, max_depth=2))
        b.add_children(ROOT, np.array([10, 11, 12, 13]), _lp(0.1, 0.5, 0.3, 0.1))
        assert b.next_frontier() == [1]
        b = TreeBuilder(TreeShape(size=4, max_depth=4))
        b.add_children(ROOT, np.array([10, 11, 12, 13]), _lp(0.1, 0.5, 0.3, 0.1))
        assert b.next_frontier() == [1, 2]
        b.add_children(1, np.array([20, 21]), _lp(0.6, 0.4))
        b.add_children(2, np.array([22]), _lp(0.9))
        assert b.next_frontier() == [4]  # depth 2 of a 4-node tree: 1 node; 0.5 x 0.6 = 0.30 beats 0.27 and 0.20

    def test_stops_at_max_depth_and_size(self):
        """No frontier once the newest level reaches max_depth (or the size budget)."""
        b = TreeBuilder(TreeShape(size=10, max_depth=1))
        b.add_children(ROOT, np.array([1, 2]), _lp(0.5, 0.5))
        assert b.next_frontier() == []
        b = TreeBuilder(TreeShape(size=1, max_depth=5))
        b.add_children(ROOT, np.array([1]), _lp(0.9))
        assert b.next_frontier() == []

    def test_stops_below_min_path_prob(self):
        """Expansion stops when even the best path is less likely than min_path_prob."""
        b = TreeBuilder(TreeShape(size=10, max_depth=5, min_path_prob=0.2))
        b.add_children(ROOT, np.array([1, 2]), _lp(0.15, 0.1))
        assert b.next_frontier() == []

    def test_result_keeps_size_best(self):
        """The result keeps the ``size`` highest-scoring nodes, closed under ancestors."""
        b = TreeBuilder(TreeShape(size=3, max_depth=3))
        b.add_children(ROOT, np.array([10, 11]), _lp(0.7, 0.3))
        b.add_children(0, np.array([20, 21]), _lp(0.8, 0.2))
        b.add_children(2, np.array([30]), _lp(0.5))
        t = b.result()
        np.testing.assert_array_equal(t.tokens, [10, 11, 20])  # 0.7, 0.3, 0.56 beat 0.28 (30) and 0.14 (21)
        np.testing.assert_array_equal(t.parents, [ROOT, ROOT, 0])
