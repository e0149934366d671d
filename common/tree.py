"""Token trees: the draft's proposal, its ancestor mask, depth positions and paths.

A tree hangs below an implicit *root*: the last committed token, whose main-model logits
give the distribution of the depth-1 nodes. Nodes are stored in topological order
(``parents[i] < i``); ``parents[i] == ROOT`` marks a child of the root.

Conventions follow Medusa / SpecInfer / EAGLE (row of the ancestor mask = parent's row +
self; position id = root position + depth). numpy only: no torch here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ROOT = -1  # parent index meaning "child of the root (last committed token)"


@dataclass(frozen=True)
class TokenTree:
    """A draft token tree.

    Attributes:
        tokens: ``[n]`` int64 draft token ids, topologically ordered.
        parents: ``[n]`` int32 parent index per node; ``ROOT`` (-1) for depth-1 nodes.
        scores: ``[n]`` float32 cumulative draft log-probability of the path to each node
            (EAGLE-2's ranking score); zeros when unknown.
    Raises:
        ValueError: lengths differ, or a parent index is not in ``[-1, i)``.
    """

    tokens: np.ndarray
    parents: np.ndarray
    scores: np.ndarray

    def __post_init__(self) -> None:
        if self.tokens.ndim != 1 or self.tokens.shape != self.parents.shape:
            raise ValueError(f"tokens {self.tokens.shape} and parents {self.parents.shape} differ")
        if self.scores.shape != self.tokens.shape:
            raise ValueError(f"scores {self.scores.shape} != tokens {self.tokens.shape}")
        idx = np.arange(len(self.parents))
        if np.any(self.parents < ROOT) or np.any(self.parents >= idx):
            raise ValueError("parents must satisfy -1 <= parents[i] < i (topological order)")

    @classmethod
    def build(cls, tokens, parents, scores=None) -> "TokenTree":
        """Construct from sequences, converting dtypes (scores default to zeros)."""
        tok = np.asarray(tokens, dtype=np.int64).reshape(-1)
        par = np.asarray(parents, dtype=np.int32).reshape(-1)
        sc = np.zeros(len(tok), np.float32) if scores is None else np.asarray(scores, np.float32)
        return cls(tok, par, sc.reshape(-1))

    @classmethod
    def empty(cls) -> "TokenTree":
        """A tree with no nodes (plain decoding: only the bonus token is produced)."""
        return cls.build([], [])

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


def depths(parents: np.ndarray) -> np.ndarray:
    """Depth of every node (depth-1 nodes are the root's children). ``[n]`` int64."""
    out = np.zeros(len(parents), np.int64)
    for i, p in enumerate(parents):
        out[i] = 1 if p == ROOT else out[p] + 1
    return out


def ancestor_mask(parents: np.ndarray) -> np.ndarray:
    """``[n, n]`` bool; ``mask[i, j]`` is True iff node j is node i or one of its ancestors.

    Built row by row: row i = row parents[i] + {i} (Medusa / SpecInfer tree attention).
    """
    n = len(parents)
    mask = np.zeros((n, n), dtype=bool)
    for i, p in enumerate(parents):
        if p != ROOT:
            mask[i] = mask[p]
        mask[i, i] = True
    return mask


def positions(parents: np.ndarray, root_position: int) -> np.ndarray:
    """Position ids ``[n]`` int64 = root_position + depth (the root sits at root_position)."""
    return root_position + depths(parents)


def path_to(parents: np.ndarray, node: int) -> list[int]:
    """Node indices from the depth-1 ancestor down to ``node`` inclusive; [] for ROOT."""
    path = []
    while node != ROOT:
        path.append(int(node))
        node = int(parents[node])
    return path[::-1]


def children(parents: np.ndarray) -> list[list[int]]:
    """children[k + 1] lists the children of node k; children[0] those of the root."""
    out: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for i, p in enumerate(parents):
        out[int(p) + 1].append(i)
    return out


def shape_from_paths(paths: list[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """Static tree shape (Medusa / Sequoia) from rank paths.

    Each path lists the top-k rank chosen at each depth, e.g. ``(0, 1)`` = second-best
    child of the best depth-1 token. Returns ``(parents [n] int32, ranks [n] int32)`` in
    topological order (sorted by depth, then path). Raises ValueError when a path's
    prefix is missing or a rank is negative.
    """
    ordered = sorted(set(map(tuple, paths)), key=lambda p: (len(p), p))
    index = {(): ROOT}
    parents, ranks = [], []
    for path in ordered:
        if not path or min(path) < 0:
            raise ValueError(f"invalid tree path {path!r}")
        if path[:-1] not in index:
            raise ValueError(f"tree path {path!r} has no parent path {path[:-1]!r}")
        index[path] = len(parents)
        parents.append(index[path[:-1]])
        ranks.append(path[-1])
    return np.asarray(parents, np.int32), np.asarray(ranks, np.int32)


def select_best(tree: TokenTree, budget: int) -> TokenTree:
    """Keep the ``budget`` nodes with the highest cumulative score (EAGLE-2 re-ranking).

    A path's score never increases with depth, so every kept node's ancestors are kept
    too; ties are broken toward shallower, earlier nodes, which preserves that property.
    The result is re-indexed in topological order.
    """
    n = len(tree)
    if budget >= n:
        return tree
    order = np.lexsort((np.arange(n), depths(tree.parents), -tree.scores))
    keep = np.zeros(n, bool)
    for i in order[:budget]:
        keep[i] = True
    for i in range(n):  # guard against float ties deeper than an ancestor
        p = tree.parents[i]
        if keep[i] and p != ROOT and not keep[p]:
            keep[i] = False
    return subtree(tree, np.flatnonzero(keep))


def subtree(tree: TokenTree, keep: np.ndarray) -> TokenTree:
    """The tree restricted to sorted node indices ``keep`` (closed under ancestors)."""
    remap = {ROOT: ROOT}
    for new, old in enumerate(keep):
        remap[int(old)] = new
    parents = [remap[int(tree.parents[o])] for o in keep]
    return TokenTree.build(tree.tokens[keep], parents, tree.scores[keep])


def graft(tree: TokenTree, paths: list[list[int]], max_new: int, max_depth: int,
          step_logprob: float = 0.0) -> tuple[TokenTree, list[list[int]]]:
    """Merge token ``paths`` (each a chain hanging below the root) into ``tree``.

    Each path is walked from the root: where its token equals an existing child of the
    current node the walk descends into it, otherwise a new child is appended. So the
    children of every node stay distinct tokens (what the acceptance walk needs) and the
    tree's own nodes keep their indices: new nodes get indices ``>= len(tree)`` and the
    result stays topologically ordered. A path stops at depth ``max_depth`` or when
    ``max_new`` nodes have been added (paths earlier in the list have priority). A new
    node's score is its parent's plus ``step_logprob`` (the estimated log-probability
    that one such token is accepted).

    Returns:
        (merged tree, per path the node indices it occupies, root side first).
    Raises:
        ValueError: ``max_new`` or ``max_depth`` negative.
    """
    if max_new < 0 or max_depth < 0:
        raise ValueError(f"graft needs max_new >= 0 and max_depth >= 0, got {max_new}, {max_depth}")
    tokens, parents, scores = tree.tokens.tolist(), tree.parents.tolist(), tree.scores.tolist()
    child: dict[tuple[int, int], int] = {}
    for i in range(len(tokens)):
        child.setdefault((parents[i], tokens[i]), i)
    added, placed = 0, []
    for path in paths:
        node, nodes = ROOT, []
        for tok in path[:max_depth]:
            nxt = child.get((node, int(tok)))
            if nxt is None:
                if added >= max_new:
                    break
                nxt = len(tokens)
                tokens.append(int(tok))
                parents.append(node)
                scores.append((scores[node] if node != ROOT else 0.0) + step_logprob)
                child[(node, int(tok))] = nxt
                added += 1
            nodes.append(nxt)
            node = nxt
        placed.append(nodes)
    return TokenTree.build(tokens, parents, scores), placed
