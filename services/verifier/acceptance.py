"""Which tree nodes the main model accepts, and the bonus token. Pure functions.

Definitions (as in vLLM's rejection sampler): *accepted* tokens are draft tokens on the
path the main model keeps; the *bonus* token is drawn from the main model at the last
accepted node (or at the root if nothing is accepted), so every verification step
commits ``len(accepted) + 1`` tokens.

One walk serves greedy decoding and sampling (``accept_walk``): the verifier draws ONE
token per tree row, ``drawn[u]`` (argmax for greedy; for sampling the exponential race
``argmax(p_u / E_t)`` with p_u the main model's processed distribution at node u and E_t
Exp(1) noise keyed by (request seed, absolute position t), see
``sampling.draw_tokens``), moves that vector to the host once, and walks from the root
into the child whose token equals ``drawn[u]``.

Why sampling stays lossless: the draft proposes each node's children deterministically
(top-k by draft score), so which children exist depends only on the draft. Along the
walk, the node u reached at depth d has the committed prefix as its context; its row
draws ``drawn[u] ~ p_u`` with noise E_t (t = the prefix length + d) that no earlier step
of the walk used (earlier steps used positions < t). Whether ``drawn[u]`` equals a child
only decides whether the next token is *also* read from the tree's next row, never which
token is committed: the committed token at every position is the token drawn from the
main model's distribution given the committed prefix. So the output is distributed
exactly as sampling the main model token by token, and it is the same token sequence
for every tree (any size or depth, or no tree: ``tree_size`` 0), batch and round split,
given the seed: seeded requests reproduce independently of speculation.

This equals multi-candidate rejection sampling with one-hot proposals (SpecInfer §4.3,
Sequoia §3.2): accept child x with probability p(x), else renormalise the residual p
without x and try the next child, bonus from the final residual, accepts child x with
total probability p(x) as well. ``residual_accept`` keeps that general form for a draft
that *samples* its proposals (q not one-hot), where the walk above would not apply.
"""
from __future__ import annotations

import numpy as np
import torch

from common.tree import ROOT


def accept_walk(tokens: np.ndarray, kids: list[list[int]], drawn: np.ndarray) -> tuple[list[int], int]:
    """The acceptance walk for greedy decoding and sampling (module docstring).

    Args:
        tokens: ``[n]`` draft token ids.
        kids: ``common.tree.children(parents)`` (kids[0] = root's children).
        drawn: ``[n + 1]`` int64 main-model token drawn at each row: ``drawn[0]`` at the
            root, ``drawn[1 + i]`` at node i (argmax for greedy, lowest id wins ties, see
            sampling.greedy; the exponential race for sampling).
    Returns:
        (accepted node indices root->leaf, bonus token id).

    Walk: at node u, t = drawn[u]; if a child c of u has tokens[c] == t, accept c and
    continue from c; otherwise stop and emit t as the bonus. For greedy the output equals
    plain greedy decoding token for token.
    """
    node, path = ROOT, []
    while True:
        want = int(drawn[node + 1])
        nxt = next((c for c in kids[node + 1] if tokens[c] == want), None)
        if nxt is None:
            return path, want
        path.append(nxt)
        node = nxt


def residual_accept(tokens: np.ndarray, kids: list[list[int]], probs: torch.Tensor,
                    gen: torch.Generator) -> tuple[list[int], int]:
    """Lossless multi-candidate acceptance for sampling (SpecInfer §4.3; Sequoia §3.2), the
    general residual form. Not on the serving path (``accept_walk`` is, see the module
    docstring); kept as the reference and for a draft that samples its proposals, where
    q(x) != one-hot and the residual max(p - q, 0) differs from "p without x". Syncs
    with the host per candidate.

    Args:
        tokens: ``[n]`` draft tokens; kids: children lists as in accept_walk.
        probs: ``[n + 1, V]`` fp32 main-model distributions (after temperature/top-k/top-p);
            row 0 at the root, row 1 + i at node i.
        gen: the request's generator (seeded requests are reproducible).
    Returns:
        (accepted node indices, bonus token id).

    The draft proposes each child deterministically (top-k by draft score), i.e. its
    proposal distribution for candidate x is q = one-hot(x). Per candidate, in order:
        accept x with probability min(1, p(x) / q(x)) = p(x)
        else      p <- normalise(max(p - q, 0))  (= p with x removed, renormalised)
    If every child is rejected, the bonus is sampled from the residual p. Each committed
    token is therefore distributed exactly as p (Leviathan et al. 2023, Theorem 1, applied
    candidate by candidate).
    """
    node, path = ROOT, []
    while True:
        p = probs[node + 1].clone()
        accepted = None
        for c in kids[node + 1]:
            x = int(tokens[c])
            if torch.rand((), generator=gen).item() < p[x].item():
                accepted = c
                break
            p[x] = 0.0
            total = p.sum()
            if total <= 0:  # all remaining mass was on rejected tokens: cannot happen exactly
                p = probs[node + 1].clone()
                break
            p /= total
        if accepted is None:
            return path, int(torch.multinomial(p, 1, generator=gen).item())
        path.append(accepted)
        node = accepted
