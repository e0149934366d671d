"""Which tree nodes the main model accepts, and the bonus token. Pure functions.

Definitions (as in vLLM's rejection sampler): *accepted* tokens are draft tokens on the
path the main model keeps; the *bonus* token is drawn from the main model at the last
accepted node (or at the root if nothing is accepted), so every verification step
commits ``len(accepted) + 1`` tokens.
"""

from __future__ import annotations

import numpy as np
import torch

from common.tree import ROOT


def greedy_accept(tokens: np.ndarray, kids: list[list[int]], target: np.ndarray) -> tuple[list[int], int]:
    """Greedy tree acceptance.

    Args:
        tokens: ``[n]`` draft token ids.
        kids: ``common.tree.children(parents)`` (kids[0] = root's children).
        target: ``[n + 1]`` int64 main-model argmax; ``target[0]`` at the root,
            ``target[1 + i]`` at node i (lowest id wins ties, see sampling.greedy).
    Returns:
        (accepted node indices root->leaf, bonus token id).

    Walk: at node u, the main model's choice is t = target[u]; if a child c of u has
    tokens[c] == t, accept c and continue from c; otherwise stop and emit t as bonus.
    The output equals plain greedy decoding token for token.
    """
    node, path = ROOT, []
    while True:
        want = int(target[node + 1])
        nxt = next((c for c in kids[node + 1] if tokens[c] == want), None)
        if nxt is None:
            return path, want
        path.append(nxt)
        node = nxt


def sample_accept(tokens: np.ndarray, kids: list[list[int]], probs: torch.Tensor,
                  gen: torch.Generator) -> tuple[list[int], int]:
    """Lossless multi-candidate acceptance for sampling (SpecInfer §4.3; Sequoia §3.2).

    Args:
        tokens: ``[n]`` draft tokens; kids: children lists as in greedy_accept.
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
