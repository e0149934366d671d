"""A tree policy with measured curves and a well-fed acceptance table, shared by the policy tests."""

from __future__ import annotations

import numpy as np

from common.config import Config
from services.scheduler.estimates import CostCurve
from services.scheduler.tree_policy import TreePolicy
from tests.scheduler.trees import chain_tree


def feed(policy, rounds: int = 60, depth: int = 12, seed: int = 0) -> None:
    """Rounds where each level accepts the chain node w.p. 0.9, else a sibling w.p. 0.08
    (ending the path there: siblings are leaves), else nothing."""
    rng = np.random.default_rng(seed)
    tree = chain_tree(depth)
    first_sibling = {d: depth + 3 * d for d in range(depth)}  # siblings of chain node d
    for _ in range(rounds):
        path = []
        for d in range(depth):
            u = rng.random()
            if u < 0.9:
                path.append(d)
                continue
            if u < 0.98:
                path.append(first_sibling[d])
            break
        policy.table.observe(tree, path)


def policy(verify, draft) -> TreePolicy:
    """A ``tree_size`` auto policy (max depth 12) with these verify and draft cost curves ((tokens, ms), ...)
    and an acceptance table fed ``feed``'s 60 rounds, past its first (explore) round."""
    p = TreePolicy(Config(tree_size="auto", max_accept_length=12))
    p.set_costs(CostCurve(verify), CostCurve(draft))
    feed(p)
    p.rounds = 1  # skip the exploration round
    return p
