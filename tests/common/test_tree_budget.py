"""The tree budget: one place bounding tree size, depth and the KV rows reserved for trees."""

import numpy as np
import pytest

from common.config import Config
from common.tree import ROOT, TokenTree, depths, select_best
from common.tree_budget import AUTO_DEFAULT_SIZE, AUTO_MAX_NODES, MIN_KV_HEADROOM, TreeBudget, level_width
from services.draft.policy import TreeBuilder, TreeShape


class TestTreeBudget:
    def test_from_config(self):
        """tree_size auto / N / 0 and max_accept_length become the budget's size and depth;
        prompt_lookup_num_tokens its lookup nodes (none with lookup off or tree_size 0)."""
        assert TreeBudget.from_config(Config(tree_size="auto", max_accept_length=7)) == TreeBudget(None, 7, 8)
        assert TreeBudget.from_config(Config(tree_size=12, max_accept_length=5, prompt_lookup_num_tokens=3)) \
            == TreeBudget(12, 5, 3)
        assert TreeBudget.from_config(Config(tree_size=12, max_accept_length=5, prompt_lookup=False)) \
            == TreeBudget(12, 5, 0)
        plain = TreeBudget.from_config(Config(tree_size=0))
        assert not plain.speculative and plain.lookup_nodes == 0

    @pytest.mark.parametrize("budget,shape", [
        (TreeBudget(None, 9), (AUTO_DEFAULT_SIZE, 9)),
        (TreeBudget(4, 8), (4, 4)),  # never deeper than the size
        (TreeBudget(32, 6), (32, 6)),
        (TreeBudget(0, 6), (0, 0)),
    ])
    def test_default_shape(self, budget, shape):
        """The shape used before anything is measured."""
        assert budget.default_shape() == shape

    def test_clamp(self):
        """Requests beyond the budget are cut to it."""
        assert TreeBudget(None, 6).clamp(500, 20) == (AUTO_MAX_NODES, 6)
        assert TreeBudget(8, 6).clamp(16, 3) == (8, 3)

    def test_headroom_covers_every_tree(self):
        """KV headroom holds the largest tree a round may send (also 1024-node configs) and
        the draft's level rows of a look-ahead tree."""
        assert TreeBudget(None, 12).kv_headroom == MIN_KV_HEADROOM
        assert TreeBudget(1024, 12).kv_headroom >= 1024
        assert TreeBudget(1024, 12, 256).kv_headroom >= 1024 + 256  # grafted lookup nodes too
        deep = TreeBudget(None, 64)
        size, depth = deep.guess_shape(*deep.default_shape())
        assert deep.kv_headroom >= depth * 4 + 64

    def test_invalid(self):
        """A negative size or lookup node count, or a depth below 1, is refused."""
        with pytest.raises(ValueError):
            TreeBudget(-1, 3)
        with pytest.raises(ValueError):
            TreeBudget(4, 3, -1)
        with pytest.raises(ValueError):
            TreeBudget(4, 0)


class TestLevelWidth:
    @pytest.mark.parametrize("size, depth, width", [(1, 1, 1), (2, 1, 1), (2, 2, 1), (4, 1, 2), (4, 3, 1),
                                                    (8, 1, 4), (8, 2, 3), (16, 12, 2), (16, 15, 1), (64, 5, 4)])
    def test_values(self, size, depth, width):
        """At most DRAFT_WIDTH frontier nodes, (size - depth + 1) // 2 near the budget, never fewer than 1."""
        assert level_width(size, depth) == width

    @pytest.mark.parametrize("seed", range(20))
    def test_no_kept_tree_needs_more(self, seed):
        """In random trees of full-width levels cut to ``size`` by select_best (its ties aside), the kept nodes
        at each depth have kept children under at most level_width(size, depth) parents."""
        rng = np.random.default_rng(seed)
        b = TreeBuilder(TreeShape(size=10_000, max_depth=6, topk=3))  # DRAFT_WIDTH nodes expanded per level
        frontier = [ROOT]
        while frontier:
            for parent in frontier:
                b.add_children(parent, np.arange(3), np.log(rng.dirichlet(np.ones(4)))[:3])
            frontier = b.next_frontier()
        tree = TokenTree.build(b.tokens, b.parents, b.scores)
        for size in (2, 3, 4, 6, 8, 12):
            kept = select_best(tree, size)
            d = depths(kept.parents)
            for depth in range(1, int(d.max()) + 1):
                expanded = {int(p) for p, dc in zip(kept.parents, d) if dc == depth + 1}
                assert len(expanded) <= level_width(size, depth)
