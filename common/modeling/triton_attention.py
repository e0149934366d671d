"""Tree attention as one Triton kernel (CUDA; also runs under ``TRITON_INTERPRET=1``).

Each program takes one sequence ``b``, one KV head and a block of ``BLOCK_M`` query rows,
where the query heads sharing that KV head (GQA) are folded into the row axis
(row ``r`` = token ``r // group``, head ``kv_head * group + r % group``), so every K/V
row is loaded once per group. Keys are read straight from the slot KV cache in two
phases: the committed prefix ``[0, start)`` (visible to a row up to its ``vis`` length),
then the ``T`` new rows ``[start, start + T)`` (pending tokens + tree nodes), whose
visibility is a per-query bitmask packed in int64 words (bit ``j`` of word ``j // 64``
= "may attend new token j"; the ancestor relation of SpecInfer §4.2 / Medusa §2.1.2).
No dense ``[q, kv]`` mask or bias is materialised.

Softmax is the online (streaming) form of FlashAttention-2 (Dao 2023, Alg. 1): a
running max ``m``, running sum ``l`` and fp32 accumulator rescaled by
``exp(m_old - m_new)``, in base 2 (``exp2`` with ``log2(e)`` folded into the scale).
A row that sees no key at all keeps ``l = 0`` and is written as zeros, never NaN.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

BITS_PER_WORD = 64  # mask bits per int64 word
BLOCK_M = 64  # folded query rows per program
BLOCK_N = 64  # keys per iteration; == BITS_PER_WORD so one word covers a key block
LOG2E = 1.4426950408889634
INTERPRET_ENV = "TRITON_INTERPRET"  # the interpreter's bf16 tl.dot is wrong: upcast there
_DOT_PRECISION = {torch.float32: "ieee", torch.float16: "tf32", torch.bfloat16: "tf32"}


@triton.jit
def _attend_block(q, k_base, v_base, cols, col_ok, allowed, stride_kn, d, d_ok,
                  m_i, l_i, acc, scale_log2, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """One FlashAttention-2 step over ``BLOCK_N`` keys; returns updated (m, l, acc)."""
    kv_mask = col_ok[:, None] & d_ok[None, :]
    k = tl.load(k_base + cols[:, None] * stride_kn + d[None, :], mask=kv_mask, other=0.0)
    if UPCAST:
        k = k.to(tl.float32)
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2  # [M, N] fp32
    s = tl.where(allowed, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # fully masked so far: keep 0s
    p = tl.exp2(s - m_safe[:, None])
    alpha = tl.exp2(m_i - m_safe)
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(v_base + cols[:, None] * stride_kn + d[None, :], mask=kv_mask, other=0.0)
    pv = p.to(v.dtype)  # FlashAttention-2: P in the input dtype for the second matmul
    if UPCAST:
        pv, v = pv.to(tl.float32), v.to(tl.float32)
    acc = acc * alpha[:, None] + tl.dot(pv, v, input_precision=PRECISION)
    return m_new, l_i, acc


@triton.jit
def _tree_attn_kernel(Q, K, V, O, Slots, Starts, Vis, Bits,
                      stride_qb, stride_qt, stride_qh, stride_ks, stride_kn, stride_kh,
                      stride_ob, stride_ot, stride_oh, stride_visb, stride_bitb, stride_bitt,
                      T, max_len, scale_log2,
                      GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
                      UPCAST: tl.constexpr):
    """Grid ``(B, kv_heads, cdiv(T * GROUP, BLOCK_M))``; see the module docstring."""
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    rows = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)
    t = rows // GROUP
    head = kvh * GROUP + rows % GROUP
    row_ok = t < T
    d = tl.arange(0, BLOCK_D)
    d_ok = d < HEAD_DIM
    q_ptrs = Q + b * stride_qb + t[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :]
    q = tl.load(q_ptrs, mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    slot = tl.load(Slots + b).to(tl.int64)
    start = tl.load(Starts + b).to(tl.int32)
    vis = tl.load(Vis + b * stride_visb + t, mask=row_ok, other=0)
    k_base = K + slot * stride_ks + kvh * stride_kh
    v_base = V + slot * stride_ks + kvh * stride_kh
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    offs = tl.arange(0, BLOCK_N)
    for n0 in range(0, start, BLOCK_N):  # committed prefix: row sees columns < vis
        cols = n0 + offs
        allowed = cols[None, :] < vis[:, None]
        m_i, l_i, acc = _attend_block(q, k_base, v_base, cols, cols < start, allowed, stride_kn,
                                      d, d_ok, m_i, l_i, acc, scale_log2, PRECISION, UPCAST)
    for n0 in range(0, T, BLOCK_N):  # new tokens: ancestor bitmask, one word per block
        j = n0 + offs
        cols = start + j
        col_ok = (j < T) & (cols < max_len)
        word = tl.load(Bits + b * stride_bitb + t * stride_bitt + n0 // BLOCK_N, mask=row_ok, other=0)
        bit = (word[:, None] >> offs[None, :].to(tl.int64)) & 1
        allowed = (bit != 0) & col_ok[None, :]
        m_i, l_i, acc = _attend_block(q, k_base, v_base, cols, col_ok, allowed, stride_kn,
                                      d, d_ok, m_i, l_i, acc, scale_log2, PRECISION, UPCAST)
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]  # l == 0: acc is 0 -> zeros
    o_ptrs = O + b * stride_ob + t[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :]
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])


def compact_mask(mask: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense tree mask -> (prefix visibility, packed bitmask over the new tokens).

    Args:
        mask: ``[B, 1, T, S]`` bool as built by ``attention.build_batch``: for row t of
            sequence b, columns ``[0, starts[b])`` are the committed prefix and must be
            visible as a leading run (all, none, or the first few), columns
            ``[starts[b], starts[b] + T)`` are the new tokens.
        starts: ``[B]`` int64 committed prefix length (tokens) per sequence.
    Returns:
        ``vis [B, T]`` int32 (visible prefix length per row) and ``bits [B, T, W]`` int64
        with ``W = ceil(T / 64)``; bit ``j % 64`` of word ``j // 64`` = may attend new token j.
    """
    B, _, T, S = mask.shape
    m = mask[:, 0]  # [B, T, S]
    col = torch.arange(S, device=mask.device)
    vis = (m & (col[None, :] < starts[:, None])[:, None, :]).sum(-1, dtype=torch.int32)
    idx = starts[:, None] + torch.arange(T, device=mask.device)  # [B, T] new-token columns
    new = torch.gather(m, 2, idx.clamp(max=S - 1)[:, None, :].expand(B, T, T))
    new = new & (idx < S)[:, None, :]  # [B, T(query), T(key)]
    words = triton.cdiv(T, BITS_PER_WORD)
    new = F.pad(new, (0, words * BITS_PER_WORD - T)).view(B, T, words, BITS_PER_WORD)
    weights = torch.ones(BITS_PER_WORD, dtype=torch.int64, device=mask.device).bitwise_left_shift(
        torch.arange(BITS_PER_WORD, device=mask.device))  # bit 63 is -2**63: the sum stays exact
    return vis, (new.to(torch.int64) * weights).sum(-1)


def tree_attention_compact(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor,
                           starts: torch.Tensor, vis: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """Launch the kernel.

    Args:
        q: ``[B, T, heads, D]`` (RoPE applied), fp32/fp16/bf16, last dim contiguous.
        k, v: one layer of the cache, ``[slots, max_len, kv_heads, D]``, q's dtype; the
            new tokens' K/V already written at rows ``starts[b] + t``.
        slots, starts: ``[B]`` int32/int64 slot id and committed prefix length (tokens).
        vis, bits: from :func:`compact_mask`.
    Returns:
        ``[B, T, heads * D]`` in q's dtype (fp32 accumulation inside).
    Raises:
        ValueError: heads not a multiple of kv_heads, dtype/device mismatch, bad shapes.
    """
    B, T, H, D = q.shape
    kvh = k.shape[2]
    if H % kvh or k.dtype != q.dtype or k.shape != v.shape or k.stride() != v.stride():
        raise ValueError(f"bad tree attention inputs: q {tuple(q.shape)} {q.dtype}, "
                         f"k {tuple(k.shape)} {k.dtype}, v {tuple(v.shape)}")
    if q.dtype not in _DOT_PRECISION or q.stride(-1) != 1 or k.stride(-1) != 1:
        raise ValueError(f"q/k/v need a contiguous last dim and fp32/fp16/bf16, got {q.dtype}")
    assert vis.shape == (B, T) and bits.shape[:2] == (B, T), (vis.shape, bits.shape)
    g = H // kvh
    upcast = q.dtype == torch.bfloat16 and os.environ.get(INTERPRET_ENV) == "1"
    out = torch.empty(B, T, H, D, dtype=q.dtype, device=q.device)
    vis, bits = vis.contiguous(), bits.contiguous()
    grid = (B, kvh, triton.cdiv(T * g, BLOCK_M))
    _tree_attn_kernel[grid](
        q, k, v, out, slots, starts, vis, bits,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        out.stride(0), out.stride(1), out.stride(2), vis.stride(0), bits.stride(0), bits.stride(1),
        T, k.shape[1], LOG2E / D ** 0.5,
        GROUP=g, HEAD_DIM=D, BLOCK_D=max(16, triton.next_power_of_2(D)),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, PRECISION="ieee" if upcast else _DOT_PRECISION[q.dtype],
        UPCAST=upcast)
    return out.view(B, T, H * D)


class TritonTreeAttention:
    """One forward pass's tree attention by the kernel, called like ``attention.tree_attention``.

    The slot and prefix-length tensors and the compacted mask are built once, here, and every
    layer reuses them. Built per layer they cost two host-to-device copies (each waits until the
    GPU has drained its queue) and about ten small kernels: a Qwen2.5-1.5B-shaped bf16 pass took
    37 ms on an H200 at every token count from 1 to 256 (``scripts/gpu_verify_curve.py``).

    Args:
        mask: ``[B, 1, T, S]`` bool on the kernel's device (see :func:`compact_mask`).
        cache: the KV cache; ``cache.lengths[slot]`` must stay the committed prefix length for
            the whole pass (the model writes the new rows after it and does not advance it).
        slots: B slot ids.
    """

    def __init__(self, mask: torch.Tensor, cache, slots: list[int]) -> None:
        host = torch.tensor([[cache.lengths[s] for s in slots], list(slots)], dtype=torch.int64)  # [2, B]
        self.starts, self.slots = host.to(mask.device).unbind(0)  # one copy: [B] int64 each
        self.vis, self.bits = compact_mask(mask, self.starts)

    def __call__(self, q: torch.Tensor, cache, layer: int, slots: list[int], mask: torch.Tensor) -> torch.Tensor:
        """``[B, T, heads, D]`` queries of ``layer`` -> ``[B, T, heads * D]`` (``slots`` and ``mask``
        are those given at construction)."""
        return tree_attention_compact(q, cache.k[layer], cache.v[layer], self.slots, self.starts, self.vis, self.bits)


def tree_attention_triton(q: torch.Tensor, cache, layer: int, slots: list[int],
                          mask: torch.Tensor) -> torch.Tensor:
    """Drop-in for ``attention.tree_attention`` (same arguments and result) for one layer; a
    forward pass over many layers uses one :class:`TritonTreeAttention` instead."""
    return TritonTreeAttention(mask, cache, slots)(q, cache, layer, slots, mask)


__all__ = ["TritonTreeAttention", "compact_mask", "tree_attention_compact", "tree_attention_triton"]
