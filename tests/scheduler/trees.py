"""Token trees shared by the scheduler's policy tests."""

from __future__ import annotations

from common.tree import TokenTree


def chain_tree(depth: int, siblings: int = 3) -> TokenTree:
    """A best-first chain of ``depth`` nodes (scores -0.1 per level), each chain node with
    ``siblings`` low-scoring alternative children; returns the tree, chain first."""
    tokens, parents, scores = [], [], []
    for d in range(depth):
        tokens.append(100 + d)
        parents.append(d - 1 if d else -1)
        scores.append(-0.1 * (d + 1))
    chain = list(range(depth))
    for node in [-1] + chain[:-1]:
        for s in range(siblings):
            tokens.append(500 + len(tokens))
            parents.append(node)
            base = -0.1 * (node + 1) if node >= 0 else 0.0
            scores.append(base - 3.0 - s)
    return TokenTree.build(tokens, parents, scores)
