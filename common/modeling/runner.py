"""Batched forward over per-sequence segments (pending tokens + tree), shared by the
draft worker and the verifier."""

from __future__ import annotations

import numpy as np
import torch

from common.modeling.attention import build_batch
from common.modeling.kv_cache import KVCache
from common.modeling.model import DecoderModel

PREFILL_ALONE = 48  # segments longer than this run in a batch of their own (no padding waste)


def batches(lengths: list[int]) -> list[list[int]]:
    """Group segment indices: short segments together, each long one alone."""
    short = [i for i, n in enumerate(lengths) if n <= PREFILL_ALONE]
    groups = [[i] for i, n in enumerate(lengths) if n > PREFILL_ALONE]
    return ([short] if short else []) + groups


def forward_segments(model: DecoderModel, cache: KVCache, slots: list[int], pending: list[list[int]],
                     tokens: list[np.ndarray], parents: list[np.ndarray]) -> list[torch.Tensor]:
    """Run each sequence's (pending tokens + tree nodes) through ``model``.

    The segment of slot s is written at rows ``cache.lengths[s] + t``; lengths are NOT
    advanced (the caller commits what it keeps). Returns per sequence the hidden states
    ``[len(pending) + n, hidden]``.
    """
    lengths = [len(p) + len(t) for p, t in zip(pending, tokens)]
    for s, n in zip(slots, lengths):
        cache.check_room(s, n)
    out: list[torch.Tensor | None] = [None] * len(slots)
    for group in batches(lengths):
        prefix = [cache.lengths[slots[i]] for i in group]
        tok, pos, mask = build_batch(prefix, [pending[i] for i in group], [tokens[i] for i in group],
                                     [parents[i] for i in group])
        hidden = model.forward(tok.to(model.device), pos.to(model.device), cache,
                               [slots[i] for i in group], mask.to(model.device))  # [b, T, H]
        for row, i in enumerate(group):
            out[i] = hidden[row, :lengths[i]]
    return out  # type: ignore[return-value]
