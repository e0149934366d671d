"""Token trees: ancestor mask, positions, paths, static shapes and best-node selection."""

import numpy as np
import pytest

from common.tree import (ROOT, TokenTree, ancestor_mask, children, depths, graft, path_to, positions,
                         select_best, shape_from_paths)

# Worked example:        root
#                       /    \
#                     n0      n1
#                    /  \       \
#                  n2    n3      n5
#                  |
#                  n4
PARENTS = np.array([ROOT, ROOT, 0, 0, 2, 1], np.int32)


class TestAncestorMask:
    def test_hand_worked_tree(self):
        """Each row marks the node itself and all its ancestors, nothing else."""
        expected = np.array([
            [1, 0, 0, 0, 0, 0],
            [0, 1, 0, 0, 0, 0],
            [1, 0, 1, 0, 0, 0],
            [1, 0, 0, 1, 0, 0],
            [1, 0, 1, 0, 1, 0],
            [0, 1, 0, 0, 0, 1],
        ], dtype=bool)
        np.testing.assert_array_equal(ancestor_mask(PARENTS), expected)

    def test_chain_is_lower_triangular(self):
        """A single chain (plain speculative decoding) gives a causal mask."""
        np.testing.assert_array_equal(ancestor_mask(np.array([ROOT, 0, 1, 2])), np.tril(np.ones((4, 4), bool)))

    def test_empty_tree(self):
        """A tree with no nodes has a 0x0 mask."""
        assert ancestor_mask(np.zeros(0, np.int32)).shape == (0, 0)


class TestPositions:
    def test_hand_worked_tree(self):
        """Position = root position + depth, so siblings share a position."""
        np.testing.assert_array_equal(depths(PARENTS), [1, 1, 2, 2, 3, 2])
        np.testing.assert_array_equal(positions(PARENTS, 10), [11, 11, 12, 12, 13, 12])


class TestPaths:
    def test_path_to_and_children(self):
        """path_to lists a node's ancestors root-first; children indexes the root at 0."""
        assert path_to(PARENTS, 4) == [0, 2, 4]
        assert path_to(PARENTS, 5) == [1, 5]
        assert path_to(PARENTS, ROOT) == []
        assert children(PARENTS) == [[0, 1], [2, 3], [5], [4], [], [], []]


class TestTokenTree:
    def test_rejects_non_topological_parents(self):
        """A parent index at or after its child is refused."""
        with pytest.raises(ValueError, match="topological"):
            TokenTree.build([1, 2], [ROOT, 1])
        with pytest.raises(ValueError, match="topological"):
            TokenTree.build([1], [-2])

    def test_rejects_length_mismatch(self):
        """tokens, parents and scores must have the same length."""
        with pytest.raises(ValueError):
            TokenTree.build([1, 2], [ROOT])
        with pytest.raises(ValueError):
            TokenTree.build([1, 2], [ROOT, 0], [0.0])

    def test_empty(self):
        """The empty tree has no nodes."""
        assert len(TokenTree.empty()) == 0


class TestShapeFromPaths:
    def test_hand_worked_shape(self):
        """Paths are ordered by depth then rank; parents point at the prefix path."""
        parents, ranks = shape_from_paths([(0, 0, 0), (1,), (0,), (0, 1), (0, 0), (0,)])
        np.testing.assert_array_equal(parents, [ROOT, ROOT, 0, 0, 2])
        np.testing.assert_array_equal(ranks, [0, 1, 0, 1, 0])

    @pytest.mark.parametrize("paths", [[(0, 1)], [(0,), (1, 0, 0)]])
    def test_missing_parent_path(self, paths):
        """A path whose prefix is absent raises ValueError naming the missing prefix."""
        with pytest.raises(ValueError, match="no parent path"):
            shape_from_paths(paths)

    @pytest.mark.parametrize("paths", [[()], [(0,), (-1,)], [(0,), (0, -2)]])
    def test_empty_or_negative_path(self, paths):
        """An empty path or a negative rank raises ValueError."""
        with pytest.raises(ValueError, match="invalid tree path"):
            shape_from_paths(paths)


class TestSelectBest:
    TREE = TokenTree.build([10, 11, 12, 13, 14], [ROOT, ROOT, 0, 0, 2], [-0.1, -1.0, -0.3, -0.5, -0.4])

    def test_keeps_best_nodes_reindexed(self):
        """The highest-scoring nodes are kept, re-indexed in topological order."""
        t = select_best(self.TREE, 3)
        np.testing.assert_array_equal(t.tokens, [10, 12, 14])
        np.testing.assert_array_equal(t.parents, [ROOT, 0, 1])
        t = select_best(self.TREE, 4)
        np.testing.assert_array_equal(t.tokens, [10, 12, 13, 14])
        np.testing.assert_array_equal(t.parents, [ROOT, 0, 0, 1])
        np.testing.assert_allclose(t.scores, [-0.1, -0.3, -0.5, -0.4])

    def test_budget_at_least_size_returns_tree(self):
        """A budget covering every node keeps the tree as is."""
        assert select_best(self.TREE, 5) is self.TREE

    def test_tie_prefers_shallower(self):
        """On equal scores the parent (shallower) wins, so the child is never kept alone."""
        t = select_best(TokenTree.build([7, 8], [ROOT, 0], [-0.5, -0.5]), 1)
        np.testing.assert_array_equal(t.tokens, [7])

    def test_random_trees_keep_ancestors(self):
        """On random trees with monotone path scores the kept set is closed under ancestors."""
        rng = np.random.default_rng(0)
        for _ in range(200):
            n = int(rng.integers(1, 40))
            parents = np.array([ROOT] + [int(rng.integers(-1, i)) for i in range(1, n)], np.int32)
            scores = np.zeros(n, np.float32)
            for i in range(n):
                step = -float(rng.choice([0.0, rng.exponential()]))
                scores[i] = step + (0.0 if parents[i] == ROOT else scores[parents[i]])
            tree = TokenTree.build(np.arange(n) + 100, parents, scores)
            budget = int(rng.integers(0, n + 1))
            best = select_best(tree, budget)
            assert len(best) == budget
            kept = set(best.tokens.tolist())
            for tok in kept:
                for anc in path_to(parents, tok - 100):
                    assert anc + 100 in kept


def distinct_children(tree: TokenTree) -> bool:
    """Every node's children carry distinct tokens."""
    return all(len({int(tree.tokens[c]) for c in kids}) == len(kids) for kids in children(tree.parents))


class TestGraft:
    # draft tree of the worked example, tokens: n0=10 n1=11 n2=20 n3=21 n4=30 n5=22
    DRAFT = TokenTree.build([10, 11, 20, 21, 30, 22], PARENTS, [-0.1, -1.0, -0.3, -0.9, -0.5, -1.5])

    def test_descends_shared_prefix_then_branches(self):
        """A path 10, 20, 30, 40 runs through n0, n2, n4 and adds one node (40) below n4;
        the draft nodes keep their indices, tokens and scores."""
        merged, placed = graft(self.DRAFT, [[10, 20, 30, 40]], max_new=8, max_depth=8, step_logprob=-0.7)
        assert placed == [[0, 2, 4, 6]]
        assert len(merged) == 7 and merged.tokens[6] == 40 and merged.parents[6] == 4
        np.testing.assert_array_equal(merged.tokens[:6], self.DRAFT.tokens)
        np.testing.assert_array_equal(merged.scores[:6], self.DRAFT.scores)
        assert merged.scores[6] == pytest.approx(-0.5 - 0.7)

    def test_new_branch_at_the_root_and_dedup(self):
        """A path whose first token is no root child becomes a new root branch; a second
        path sharing its prefix reuses those nodes: children stay distinct."""
        merged, placed = graft(self.DRAFT, [[12, 13, 14], [12, 13, 15]], max_new=8, max_depth=8)
        assert placed == [[6, 7, 8], [6, 7, 9]]
        assert merged.parents.tolist()[6:] == [ROOT, 6, 7, 7]
        assert distinct_children(merged)

    def test_budget_and_depth(self):
        """At most max_new nodes are added (earlier paths first) and none below max_depth."""
        merged, placed = graft(self.DRAFT, [[10, 20, 30, 40, 50], [11, 60]], max_new=1, max_depth=8)
        assert placed == [[0, 2, 4, 6], [1]] and len(merged) == 7
        merged, placed = graft(self.DRAFT, [[10, 20, 30, 40, 50]], max_new=8, max_depth=2)
        assert placed == [[0, 2]] and len(merged) == 6

    def test_onto_an_empty_tree(self):
        """With no draft tree a lookup chain is the whole tree."""
        merged, placed = graft(TokenTree.empty(), [[5, 6, 7]], max_new=4, max_depth=4)
        assert merged.tokens.tolist() == [5, 6, 7] and merged.parents.tolist() == [ROOT, 0, 1]
        assert placed == [[0, 1, 2]]

    def test_negative_budget_refused(self):
        """A negative node budget or depth is a ValueError."""
        with pytest.raises(ValueError):
            graft(self.DRAFT, [[1]], max_new=-1, max_depth=2)
