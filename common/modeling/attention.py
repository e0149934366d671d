"""Tree attention: queries = new tokens + tree nodes, keys = committed prefix + themselves.

The visibility rule (SpecInfer §4.2, Medusa §2.1.2): a query sees the whole committed
prefix, the pending committed tokens causally, and among tree nodes only itself and its
ancestors. ``build_mask`` turns that into a boolean ``[B, 1, T, S]`` mask; on CPU the
attention itself is PyTorch SDPA with that explicit mask (``tree_attention``), on CUDA the
Triton kernel of ``triton_attention.py`` (which packs the mask into per-query ancestor bits
once per forward pass); ``tree_attention_for`` picks one per pass.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from common.modeling.kv_cache import KVCache
from common.tree import ROOT, ancestor_mask


def segment_mask(prefix_len: int, num_pending: int, parents: np.ndarray, width: int) -> np.ndarray:
    """Visibility for one sequence: ``[num_pending + n, width]`` bool.

    Columns: ``[0, prefix_len)`` committed KV, then the pending tokens, then the n tree
    nodes (each tree node's root is the last pending token). Rows: pending tokens, then
    tree nodes. ``width >= prefix_len + num_pending + n``; extra columns stay False.
    """
    n = len(parents)
    t = num_pending + n
    out = np.zeros((t, width), dtype=bool)
    out[:, :prefix_len] = True
    pend = np.tril(np.ones((num_pending, num_pending), dtype=bool))
    out[:num_pending, prefix_len:prefix_len + num_pending] = pend
    out[num_pending:, prefix_len:prefix_len + num_pending] = True
    out[num_pending:, prefix_len + num_pending:prefix_len + t] = ancestor_mask(parents)
    return out


def segment_positions(prefix_len: int, num_pending: int, parents: np.ndarray) -> np.ndarray:
    """Position ids ``[num_pending + n]`` int64: pending tokens count up from prefix_len,
    tree nodes sit at (last pending position + depth)."""
    from common.tree import positions
    pend = np.arange(prefix_len, prefix_len + num_pending, dtype=np.int64)
    return np.concatenate([pend, positions(parents, prefix_len + num_pending - 1)])


def build_batch(prefix_lens: list[int], pending: list[list[int]], trees_tokens: list[np.ndarray],
                trees_parents: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad B segments (pending tokens + tree) into one forward batch.

    Returns ``tokens [B, T]`` int64, ``positions [B, T]`` int64 and ``mask [B, 1, T, S]``
    bool with ``T = max(len)`` and ``S = max(prefix_len + T)``. Padding rows see column 0
    only (their outputs are ignored; this keeps every softmax row finite).
    """
    lens = [len(p) + len(t) for p, t in zip(pending, trees_tokens)]
    T = max(lens)
    S = max(pl + T for pl in prefix_lens)
    B = len(lens)
    tokens = np.zeros((B, T), np.int64)
    pos = np.zeros((B, T), np.int64)
    mask = np.zeros((B, 1, T, S), dtype=bool)
    mask[:, :, :, 0] = True
    for b in range(B):
        tokens[b, :lens[b]] = np.concatenate([np.asarray(pending[b], np.int64), trees_tokens[b]])
        pos[b, :lens[b]] = segment_positions(prefix_lens[b], len(pending[b]), trees_parents[b])
        pos[b, lens[b]:] = pos[b, lens[b] - 1] if lens[b] else 0
        mask[b, 0, :lens[b]] = segment_mask(prefix_lens[b], len(pending[b]), trees_parents[b], S)
    return torch.from_numpy(tokens), torch.from_numpy(pos), torch.from_numpy(mask)


def tree_attention_for(mask: torch.Tensor, cache: KVCache, slots: list[int], prefix_run: bool = True,
                       kernel: bool | None = None):
    """The attention callable of one forward pass (arguments as :func:`tree_attention`'s): on CUDA a
    ``triton_attention.TritonTreeAttention``, whose mask compaction every layer shares, else
    :func:`tree_attention`. ``mask``: ``[B, 1, T, S]`` bool on the model's device. ``prefix_run``
    False (some row sees cached columns other than a leading run, e.g. tree rows of an earlier draft
    level): :func:`tree_attention` on every device, since the kernel keeps only a prefix length.
    ``kernel``: whether this device runs the kernel (None: ``mask.is_cuda``; True on the CPU runs it
    under Triton's interpreter, as tests and ``scripts/triton_real_check.py`` do)."""
    if (mask.is_cuda if kernel is None else kernel) and prefix_run:
        from common.modeling.triton_attention import TritonTreeAttention
        return TritonTreeAttention(mask, cache, slots)
    return tree_attention


def tree_attention(q: torch.Tensor, cache: KVCache, layer: int, slots: list[int],
                   mask: torch.Tensor) -> torch.Tensor:
    """Attention of new queries over each slot's cached rows.

    Args:
        q: ``[B, T, heads, D]`` queries (RoPE applied).
        cache: holds K/V ``[slots, max_len, kv_heads, D]`` for ``layer``; the new tokens'
            K/V must already be written.
        mask: ``[B, 1, T, S]`` bool (True = attend).
    Returns:
        ``[B, T, heads * D]`` in q's dtype. GQA is handled by folding each KV head's
        query group into the query axis, so K/V are never repeated.
    """
    B, T, H, D = q.shape
    # a padded batch may be wider than a slot; real rows never see columns past max_len
    S = min(mask.shape[-1], cache.max_len)
    mask = mask[..., :S]
    kvh = cache.k.shape[3]
    g = H // kvh
    if B == 1:
        k = cache.k[layer, slots[0], :S].unsqueeze(0)  # [1, S, kvh, D] (view)
        v = cache.v[layer, slots[0], :S].unsqueeze(0)
    else:
        idx = torch.tensor(slots, device=q.device)
        k = cache.k[layer, :, :S][idx]  # [B, S, kvh, D]
        v = cache.v[layer, :, :S][idx]
    qg = q.view(B, T, kvh, g, D).permute(0, 2, 3, 1, 4).reshape(B, kvh, g * T, D)
    m = mask.repeat(1, 1, g, 1) if g > 1 else mask  # [B, 1, g*T, S]
    out = F.scaled_dot_product_attention(qg, k.transpose(1, 2), v.transpose(1, 2), attn_mask=m)
    return out.view(B, kvh, g, T, D).permute(0, 3, 1, 2, 4).reshape(B, T, H * D)


def visible_columns(mask: torch.Tensor, max_len: int, rows: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each query row's visible KV columns as CSR, from ``mask`` ``[B, 1, T, S]`` (bool), columns
    below ``max_len``: (``cols`` ``[nnz]`` int32, each row's ascending; ``offsets`` ``[R + 1]``
    int64). ``rows`` (``[R]`` int64 flat indices ``b * T + t``, e.g. ``Ragged.rows``): only those
    rows, in that order; default all ``B * T``."""
    m = mask[:, 0, :, :max_len]
    m = m.reshape(m.shape[0] * m.shape[1], m.shape[2])  # [B * T, S]
    if rows is not None:
        m = m[rows]
    cols = m.nonzero()[:, 1].to(torch.int32).contiguous()  # row-major: each row's columns ascending
    offsets = torch.zeros(m.shape[0] + 1, dtype=torch.int64)
    offsets[1:] = m.sum(-1).cumsum(0)
    return cols, offsets


class ExactAttention:
    """Tree attention whose result for a query row does not depend on the other rows of the
    pass (``csrc/decoder_ops.cpp``, ``exact_attention``): each row sums over its visible
    columns in ascending order, so a token verified inside a tree, decoded alone, or re-prefilled
    with its whole prompt gets bit-identical outputs. SDPA's blocked kernels sum in an order that
    depends on the pass's shape, which is harmless for continuous math but not for a model that
    rounds its activations (W4A8: one flipped int8 rounding can change a near-tie greedy token).

    Built once per forward from its ``mask`` ``[B, 1, T, S]`` (bool): per row, the slot and the
    list of visible columns (CSR: ``offsets`` ``[B * T + 1]`` int64, ``cols`` int32); every
    segment, prompt prefills included (a prefill's cost grows as T * S, like SDPA's).
    ``lib``: a loaded ``native.PackedGemmLibrary``."""

    def __init__(self, lib, mask: torch.Tensor, slots: list[int], max_len: int) -> None:
        self.lib = lib
        self.cols, self.offsets = visible_columns(mask, max_len)
        self.row_slot = torch.tensor(slots, dtype=torch.int64).repeat_interleave(mask.shape[2])

    def __call__(self, q: torch.Tensor, cache: KVCache, layer: int, slots: list[int], mask: torch.Tensor) -> torch.Tensor:
        """Like :func:`tree_attention`: q ``[B, T, heads, D]`` (bf16 or fp32, the cache's dtype,
        CPU) -> ``[B, T, heads * D]``. Raises ValueError for another dtype or device."""
        if q.dtype not in (torch.bfloat16, torch.float32) or cache.k.dtype != q.dtype or q.device.type != "cpu":
            raise ValueError(f"exact attention takes bf16 or fp32 CPU tensors of the cache's dtype, got q "
                             f"{q.dtype} on {q.device}, cache {cache.k.dtype}")
        B, T, H, D = q.shape
        q = q.contiguous()
        out = torch.empty_like(q)
        fn = self.lib.exact_attention_bf16 if q.dtype == torch.bfloat16 else self.lib.exact_attention_f32
        fn(q.data_ptr(), cache.k[layer].data_ptr(), cache.v[layer].data_ptr(), out.data_ptr(),
           self.row_slot.data_ptr(), self.offsets.data_ptr(), self.cols.data_ptr(), B * T, H, cache.k.shape[3], D,
           cache.max_len, 1.0 / math.sqrt(D), torch.get_num_threads())
        return out.view(B, T, H * D)


__all__ = ["ROOT", "ExactAttention", "build_batch", "segment_mask", "segment_positions", "tree_attention",
           "tree_attention_for", "visible_columns"]
