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
    if top_p < 1.0:
        # sort only the best TOP_P_CANDIDATES unless they hold less than top_p of the mass
        k = min(TOP_P_CANDIDATES, probs.shape[-1])
        sorted_p, idx = torch.topk(probs, k, dim=-1)
        if bool((sorted_p.sum(-1) < top_p).any()):
            sorted_p, idx = torch.sort(probs, dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (always at least the top token)
        drop = (sorted_p.cumsum(-1) - sorted_p) >= top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """Argmax ``[N]`` int64. Tie-break: the lowest token id among equal maxima (torch.argmax
    returns the first maximal index); plain decoding and tree verification both use this."""
    return logits.argmax(dim=-1)
