"""Prompt-lookup candidates grafted onto a round's draft trees. Pure and torch-free.

Where: when a round's draft trees are turned into VerifySteps (``RoundDriver._start_verify``),
so every round gets them: rounds with a draft-model tree (fresh or an overlap guess), and
rounds without one (the policy chose 0 draft nodes, no draft worker is present:
degraded, or a sequence's first round, which verifies the prompt alone unless
``speculate_first_token``: lookup costs no draft compute, so it rides along with that
prefill and the draft model still stays off the time to first token). The candidates come from ``common.lookup.find_candidates`` over the sequence's
committed tokens (prompt + output) and are merged with ``common.tree.graft``: the tree's
own nodes keep their indices, new nodes are appended, children stay distinct tokens.

Lossless: the acceptance walk (``services/verifier/acceptance.py``) draws one main-model
token per tree row and follows the child equal to it; that is exact for any tree whose
children are distinct tokens fixed before the draw. Lookup nodes are a deterministic
function of the committed tokens (no randomness, nothing the verifier draws), so a mixed
tree keeps greedy output and the sampled distribution (and the seeded (seed, position)
draws) exactly those of the main model. Grammar-masked rows simply never draw a lookup
token the grammar refuses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import takewhile

import numpy as np

from common import wire
from common.config import Config
from common.lookup import find_candidates
from common.tree import TokenTree, graft, subtree
from services.scheduler.estimates import RequestAcceptance
from services.scheduler.lookup_policy import SeqLookup
from services.scheduler.tree_policy import TreePolicy

LOOKUP_BRANCHES = 2  # chains with distinct first tokens (older occurrences) tried per round


@dataclass(frozen=True)
class Grafted:
    """What lookup added to one sequence's tree: the first ``draft_nodes`` nodes are the
    draft model's, the rest lookup's; ``chain_nodes`` are the nodes on lookup chains
    (including draft nodes a chain ran through)."""

    draft_nodes: int
    chain_nodes: frozenset[int]


def graft_lookup(tokens: list[int], draft: wire.Tree | None, cfg: Config, nodes: int, max_depth: int,
                 step_logprob: float) -> tuple[wire.Tree, Grafted] | None:
    """The sequence's draft tree (None = none) with lookup chains grafted on: at most
    ``nodes`` new nodes, down to depth ``max_depth``; None when lookup finds nothing new.

    Args:
        tokens: the sequence's committed tokens (prompt + output); the tree's root is the last.
        cfg: ``prompt_lookup_{max,min}_ngram`` and ``prompt_lookup_num_tokens``.
        step_logprob: score step of a lookup node (log of its measured acceptance).
    """
    match = find_candidates(tokens, cfg.prompt_lookup_max_ngram, cfg.prompt_lookup_min_ngram,
                            min(cfg.prompt_lookup_num_tokens, max_depth), LOOKUP_BRANCHES)
    if match is None or nodes == 0:
        return None
    base = wire.tree_from_wire(draft) if draft is not None else TokenTree.empty()
    merged, placed = graft(base, match.chains, nodes, max_depth, step_logprob)
    if not any(placed):
        return None
    info = Grafted(draft_nodes=len(base), chain_nodes=frozenset(n for path in placed for n in path))
    return wire.tree_to_wire(merged), info


def observe(policy: TreePolicy, tree: TokenTree, accepted: list[int], info: Grafted | None,
            offered: bool = False, seq: SeqLookup | None = None, own: RequestAcceptance | None = None) -> int:
    """Record one verified tree per source: the draft model's part (nodes below
    ``draft_nodes``, with the accepted path cut at the first lookup node: what the draft
    tree alone would have accepted) in the acceptance table, the lookup part in
    ``policy.lookup`` and in the sequence's own ``seq.stats`` (``offered``: lookup could graft
    this round; finding nothing counts as 0 added); the draft's part also in ``own``, the
    request's own acceptance (``RequestAcceptance``). Returns the tokens the draft's part
    accepted (tokens)."""
    sinks = [policy.lookup] + ([seq.stats] if seq is not None else [])
    if info is None:
        policy.observe(tree, accepted, own)
        for stats in sinks if offered else []:
            stats.observe(proposed=0, accepted=0, added=0, gained=0)
        return len(accepted)
    n = info.draft_nodes
    by_draft = list(takewhile(lambda a: a < n, accepted))
    if n:
        policy.observe(subtree(tree, np.arange(n)), by_draft, own)
    for stats in sinks:
        stats.observe(proposed=len(info.chain_nodes), accepted=sum(a in info.chain_nodes for a in accepted),
                      added=len(tree) - n, gained=len(accepted) - len(by_draft))
    return len(by_draft)


def step_logprob(policy: TreePolicy, seq: SeqLookup | None = None) -> float:
    """Score step of a lookup node: log of the measured per-node lookup acceptance (the
    sequence's own, the engine-wide one as prior; engine-wide alone without ``seq``)."""
    return math.log(seq.stats.accept_rate(prior=policy.lookup) if seq is not None else policy.lookup.accept_rate())
