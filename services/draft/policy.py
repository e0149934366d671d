"""Dynamic draft-tree expansion (EAGLE-2, arXiv 2406.16858 §4). Pure numpy.

Each level, the ``width`` best not-yet-expanded nodes of the newest level (by cumulative
draft log-probability = the product of draft probabilities along the path, EAGLE-2's
confidence estimate of acceptance) are run through the draft model; each contributes its
``topk`` most likely children; near the size budget only as many as can have kept children
(``common.tree_budget.level_width``). Expansion stops at ``max_depth`` or when the best
path's probability drops below ``min_path_prob`` (pruning passes that would almost surely be
rejected). Finally the ``size`` best nodes overall are kept (``tree.select_best``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from common.tree import ROOT, TokenTree, select_best
from common.tree_budget import level_width


@dataclass(frozen=True)
class TreeShape:
    """Tree budget. size: nodes kept (tokens); max_depth: levels; topk: children per
    expanded node; width: nodes expanded per level; min_path_prob: stop threshold."""

    size: int
    max_depth: int
    topk: int = 4
    width: int = 4
    min_path_prob: float = 0.02

    def __post_init__(self) -> None:
        if self.size < 0 or self.max_depth < 1 or self.topk < 1 or self.width < 1:
            raise ValueError(f"invalid tree shape {self}")


class TreeBuilder:
    """Accumulates draft nodes level by level for one sequence."""

    def __init__(self, shape: TreeShape) -> None:
        self.shape = shape
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self.scores: list[float] = []
        self.depth: list[int] = []
        self._level: list[int] = []  # nodes created at the newest depth
        self.levels = 0  # drafted levels so far (a fast-forwarded chain does not count)
        self.chained = 0  # nodes added by add_chain (at most ``size`` per tree: KV headroom)

    def add_children(self, parent: int, tokens: np.ndarray, logprobs: np.ndarray) -> None:
        """Add children of ``parent`` (ROOT or a node index): tokens/logprobs ``[k]``."""
        base = 0.0 if parent == ROOT else self.scores[parent]
        d = 1 if parent == ROOT else self.depth[parent] + 1
        for t, lp in zip(tokens.tolist(), logprobs.tolist()):
            self._level.append(len(self.tokens))
            self.tokens.append(int(t))
            self.parents.append(parent)
            self.scores.append(base + float(lp))
            self.depth.append(d)

    def add_chain(self, parent: int, tokens: list[int]) -> None:
        """Add ``tokens`` as a path below ``parent``, each with probability 1 (grammar-forced);
        only the last node joins the newest level (the rest have their one child)."""
        if not tokens:
            return
        self.chained += len(tokens)
        for t in tokens:
            self.add_children(parent, np.array([t]), np.zeros(1))
            parent = self._level.pop()
        self._level.append(parent)

    def chain_room(self) -> int:
        """Chain nodes this tree may still get (``size`` in all)."""
        return max(self.shape.size - self.chained, 0)

    def next_frontier(self) -> list[int]:
        """Pop the nodes to expand next (the best ``level_width`` of the newest level, at most
        ``width``), or [] to stop after ``max_depth`` drafted levels."""
        level, self._level = self._level, []
        self.levels += 1
        if not level or self.levels >= min(self.shape.max_depth, self.shape.size):
            return []
        ranked = sorted(level, key=lambda i: -self.scores[i])
        best = ranked[: level_width(self.shape.size, self.depth[ranked[0]], self.shape.width)]
        if math.exp(self.scores[best[0]]) < self.shape.min_path_prob:
            return []
        return sorted(best)

    def result(self) -> TokenTree:
        """The best ``size`` nodes as a topologically ordered TokenTree."""
        tree = TokenTree.build(self.tokens, self.parents, self.scores)
        return select_best(tree, self.shape.size)
