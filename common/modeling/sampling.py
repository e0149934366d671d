"""Logit processing shared by the draft and the main model (identical on both sides).

All functions take fp32 logits ``[N, V]`` and return fp32 tensors of the same shape.
"""

from __future__ import annotations

import torch

TOP_P_CANDIDATES = 2048  # tokens sorted for top-p; the nucleus lies inside them when they hold >= top_p


def apply_penalties(logits: torch.Tensor, counts: torch.Tensor, presence: float,
                    frequency: float, repetition: float) -> torch.Tensor:
    """OpenAI presence/frequency penalties and the CTRL repetition penalty (Keskar et al.
    2019, §4.1). ``counts`` ``[N, V]``: occurrences of each token in the text before row n
    (output tokens for presence/frequency; vLLM applies repetition to prompt + output)."""
    out = logits
    if repetition != 1.0:
        seen = counts > 0
        out = torch.where(seen & (out > 0), out / repetition, torch.where(seen, out * repetition, out))
    if frequency or presence:
        out = out - frequency * counts - presence * (counts > 0).float()
    return out


def probs_from_logits(logits: torch.Tensor, temperature: float, top_k: int = 0,
                      top_p: float = 1.0) -> torch.Tensor:
    """Temperature, then top-k, then top-p (nucleus; Holtzman et al. 2020 §3.1) -> ``[N, V]`` probs.

    Raises ValueError for temperature <= 0 (greedy uses argmax, not this function).
    """
    if temperature <= 0:
        raise ValueError("probs_from_logits needs temperature > 0; use argmax for greedy")
    x = logits / temperature
    if top_k and top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    return top_p_filter(probs, top_p) if top_p < 1.0 else probs


def reads_are_free(t: torch.Tensor) -> bool:
    """True when reading ``t`` into Python costs no device synchronisation (CPU tensors)."""
    return t.device.type == "cpu"


def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filter of probs ``[N, V]``: keep the smallest prefix of most likely tokens whose
    mass reaches ``top_p`` (always the top token), renormalised.

    On an accelerator: one full sort and no data-dependent branch, so no device -> host
    sync. On CPU (:func:`reads_are_free`): sort only the best ``TOP_P_CANDIDATES`` unless
    some row's candidates hold less than ``top_p`` (then the full sort); same result.
    """
    if reads_are_free(probs):
        sorted_p, idx = torch.topk(probs, min(TOP_P_CANDIDATES, probs.shape[-1]), dim=-1)
        if bool((sorted_p.sum(-1) < top_p).any()):  # a CPU read, not a device sync
            sorted_p, idx = torch.sort(probs, dim=-1, descending=True)
    else:
        sorted_p, idx = torch.sort(probs, dim=-1, descending=True)
    drop = (sorted_p.cumsum(-1) - sorted_p) >= top_p
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p)
    return probs / probs.sum(-1, keepdim=True)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """Argmax ``[N]`` int64. Tie-break: the lowest token id among equal maxima (torch.argmax
    returns the first maximal index); plain decoding and tree verification both use this."""
    return logits.argmax(dim=-1)


MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """SplitMix64 finaliser (Steele et al. 2014): a bijective 64-bit mix, as Python ints."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def position_noise(seed: int, positions: list[int], vocab: int, device) -> torch.Tensor:
    """Exp(1) noise ``[len(positions), vocab]`` fp32 on ``device``; row j is a
    deterministic function of (``seed``, ``positions[j]``) alone (a generator on the
    device seeded with ``splitmix64(seed ^ splitmix64(position))``), so the token drawn at
    an absolute position does not depend on the tree, the batch or the round it falls in.
    ``seed``: any integer (reduced mod 2**64)."""
    rows = []
    for pos in positions:
        gen = torch.Generator(device=device)
        gen.manual_seed(splitmix64((seed & MASK64) ^ splitmix64(pos)) >> 1)
        rows.append(torch.empty(vocab, device=device).exponential_(generator=gen))
    return torch.stack(rows)


def draw_tokens(scores: torch.Tensor, temperature: float, top_k: int, top_p: float, seed: int,
                positions: list[int], row_position: torch.Tensor) -> torch.Tensor:
    """One token per row ``[N]`` int64 (on the scores' device): argmax for greedy
    (``temperature`` <= 0), else the exponential race ``argmax(p / E)`` with ``p`` the
    processed distribution (temperature, top-k, top-p) and ``E`` the Exp(1) noise of the
    row's absolute position. ``argmax(p / E)`` is distributed as ``p`` (min of independent
    exponentials E_x / p_x is attained at x with probability p_x; Gumbel-max in another
    form). ``scores``: ``[N, V]`` fp32 logits; ``positions``: the distinct absolute
    positions; ``row_position`` ``[N]`` int64: each row's index into ``positions``."""
    if temperature <= 0:
        return greedy(scores)
    probs = probs_from_logits(scores, temperature, top_k, top_p)
    noise = position_noise(seed, positions, scores.shape[-1], scores.device)  # [len(positions), V]
    return (probs / noise[row_position]).argmax(dim=-1)
