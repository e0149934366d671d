"""Batched forward over per-sequence segments (pending tokens + tree), shared by the
draft worker and the verifier."""

from __future__ import annotations

import numpy as np
import torch

from common.modeling.attention import build_batch
from common.modeling.devices import synchronize
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
        hidden = model.forward(tok.to(model.device), pos.to(model.device), cache, [slots[i] for i in group],
                               mask.to(model.device), [lengths[i] for i in group])  # [b, T, H]
        for row, i in enumerate(group):
            out[i] = hidden[row, :lengths[i]]
    return out  # type: ignore[return-value]


COST_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # tokens per forward pass to time
COST_PREFIX = 64  # committed tokens in the scratch sequence while timing


def measure_forward_ms(model: DecoderModel, cache: KVCache, grid: tuple[int, ...] = COST_GRID,
                       reps: int = 3, clock=None, prefix_len: int = COST_PREFIX) -> list[tuple[int, float]]:
    """Time one forward over T tokens (1 pending + a chain of T - 1 tree nodes) after a
    ``prefix_len``-token prefix, for each T in ``grid`` that fits; fastest of ``reps`` runs, in ms.

    Uses a scratch slot, freed afterwards. Raises CacheFullError if no slot is free.
    ``clock``: seconds function (default ``time.perf_counter``; ``time.process_time`` on a
    loaded host with one thread counts only this process's CPU time).
    """
    import time
    clock = clock or time.perf_counter
    slot = cache.allocate()
    try:
        prefix = [int(t) for t in torch.randint(0, model.spec.vocab_size, (prefix_len,))]
        forward_segments(model, cache, [slot], [prefix], [np.zeros(0, np.int64)], [np.zeros(0, np.int32)])
        cache.commit(slot, list(range(prefix_len)))
        out = []
        for t in grid:
            if prefix_len + t > cache.max_len:
                break
            tree = np.arange(1, t, dtype=np.int64), np.arange(-1, t - 2, dtype=np.int32)
            times = []
            for _ in range(reps):
                synchronize(model.device)  # on a GPU: time this pass's kernels, not the last one's
                t0 = clock()
                forward_segments(model, cache, [slot], [[1]], [tree[0]], [tree[1]])
                synchronize(model.device)
                times.append((clock() - t0) * 1e3)
            out.append((t, float(min(times))))  # least-disturbed run
        return out
    finally:
        cache.free(slot)
