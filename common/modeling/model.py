"""A lean Qwen2 / Llama decoder with slot KV cache and tree attention.

Same math as transformers' Qwen2/Llama (RMSNorm in fp32, rotate-half RoPE, GQA, SwiGLU),
with fused QKV and gate/up projections and no per-call cache objects, so that one
forward over ``(new committed tokens + tree nodes)`` of several sequences is a handful of
matmuls per layer (nano-vllm / gpt-fast style). Weights come from a transformers
state dict (see ``loader.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from common.modeling import fused_ops
from common.modeling.attention import ExactAttention, tree_attention_for
from common.modeling.kv_cache import KVCache
from common.modeling.native_forward import NativeForward
from common.modeling.quant import Int4Weight, Int8Weight


@dataclass(frozen=True)
class ModelSpec:
    """Architecture hyperparameters (from a transformers config)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float
    rms_eps: float
    qkv_bias: bool
    max_positions: int = 32768

    @classmethod
    def from_hf_config(cls, cfg) -> "ModelSpec":
        """Read a transformers Qwen2Config / LlamaConfig."""
        rope = getattr(cfg, "rope_theta", None)
        if rope is None:
            rope = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        return cls(
            vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
            num_layers=cfg.num_hidden_layers, num_heads=cfg.num_attention_heads,
            num_kv_heads=cfg.num_key_value_heads, head_dim=head_dim,
            intermediate_size=cfg.intermediate_size, rope_theta=float(rope),
            rms_eps=cfg.rms_norm_eps, qkv_bias=cfg.model_type == "qwen2",
            max_positions=getattr(cfg, "max_position_embeddings", 32768))


def linear(x: torch.Tensor, weight: torch.Tensor | Int4Weight | Int8Weight,
           bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias``; ``weight`` is a dense ``[N, K]`` tensor or a weight object
    with its own ``linear(x, bias)``: a quantized weight (:class:`~common.modeling.quant.Int4Weight`
    / ``Int8Weight``, from ``quant.quantize_weights`` / ``quant.quantize_main_weights``) or a
    ``kernels.PlannedWeight`` (kernel chosen at start)."""
    if isinstance(weight, torch.Tensor):
        return F.linear(x, weight, bias)
    return weight.linear(x, bias)


def rope_tables(spec: ModelSpec, length: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin tables ``[length, head_dim]`` for rotate-half RoPE (RoFormer, §3.4)."""
    inv = 1.0 / (spec.rope_theta ** (torch.arange(0, spec.head_dim, 2, dtype=torch.float32) / spec.head_dim))
    freqs = torch.outer(torch.arange(length, dtype=torch.float32), inv)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype).to(device), emb.sin().to(dtype).to(device)


@dataclass(frozen=True)
class Ragged:
    """Where the real rows of a right-padded ``[B, T]`` batch sit once packed into ``[1, N]``
    (N = sum of lengths): the matmuls then skip the padding, and only attention, which is
    per sequence, sees the padded layout. A batch of 8 one-token sequences where one carries
    a 9-node tree is 17 rows instead of 80."""

    B: int
    T: int
    lengths: tuple[int, ...]
    rows: torch.Tensor  # [N] int64: flat indices b * T + t of the real rows

    @classmethod
    def of(cls, lengths: list[int] | None, B: int, T: int, device) -> "Ragged | None":
        """None when there is nothing to skip (no lengths given, or every segment is T long)."""
        if lengths is None or min(lengths) >= T:
            return None
        rows = torch.cat([torch.arange(b * T, b * T + n) for b, n in enumerate(lengths)]).to(device)
        return cls(B, T, tuple(lengths), rows)

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        """``[B, T, ...]`` -> ``[1, N, ...]``."""
        return t.reshape(self.B * self.T, *t.shape[2:])[self.rows].unsqueeze(0)

    def unpack(self, t: torch.Tensor) -> torch.Tensor:
        """``[1, N, ...]`` -> ``[B, T, ...]``, zeros in the padding."""
        out = t.new_zeros((self.B * self.T, *t.shape[2:]))
        out[self.rows] = t[0]
        return out.view(self.B, self.T, *t.shape[2:])

    def segments(self, t: torch.Tensor) -> list[torch.Tensor]:
        """``[1, N, ...]`` -> B tensors ``[len_b, ...]`` (views)."""
        return list(torch.split(t[0], list(self.lengths)))


def _within(limits: tuple[tuple[int, int | None], ...] | None, rows: int, cols: int) -> bool:
    """True when ``limits`` is None (every pass) or its first entry with max rows >= ``rows`` allows ``cols``
    (max columns None: any); a pass longer than every entry is outside."""
    if limits is None:
        return True
    for max_rows, max_cols in limits:
        if rows <= max_rows:
            return max_cols is None or cols <= max_cols
    return False


class DecoderModel:
    """Qwen2/Llama decoder over a :class:`KVCache`.

    Parameters live in a plain dict of tensors (``weights``) so that tensor-parallel
    sharding (``services/verifier/tensor_parallel.py``) can replace them without touching
    the math. ``head_ids`` (``[K]`` int64, optional) restricts the LM head to K rows
    (FR-Spec, arXiv 2502.14856 §3) — logits are then over those K token ids.
    """

    def __init__(self, spec: ModelSpec, weights: dict[str, torch.Tensor], dtype: torch.dtype,
                 device: str = "cpu", head_ids: torch.Tensor | None = None, group=None) -> None:
        self.spec, self.w, self.dtype, self.device, self.group = spec, weights, dtype, device, group
        tp = 1 if group is None else torch.distributed.get_world_size(group)
        self.local_heads = spec.num_heads // tp
        self.head_ids = head_ids
        head = weights["lm_head"]
        self.head_weight = head if head_ids is None else head[head_ids].contiguous()
        self._cos, self._sin = rope_tables(spec, spec.max_positions, dtype, device)
        self.kernel_plan = None  # kernel_probe.KernelPlan once kernel_probe.install ran
        self.exact_lib = None  # a native library: attention by ExactAttention (a W4A8 main: row-independent passes)
        # ... in which passes: ((max rows, max KV columns before the pass or None for any), ...) by ascending
        # rows; the first entry with max rows >= the pass's longest segment decides, past them all SDPA; None:
        # every pass (exact_fits). exact_limits is measured on one sequence (attention_probe); a pass of several
        # sequences may also take the kernel within exact_batch_limits (as built: SDPA pads a batch)
        self.exact_limits: tuple[tuple[int, int | None], ...] | None = None
        self.exact_batch_limits: tuple[tuple[int, int | None], ...] | None = ()  # (): nothing beyond exact_limits
        self.attention_plan = None  # attention_probe.AttentionPlan once measured at start
        self.ops = fused_ops.for_model(dtype, device)  # element-wise ops: C++ for bf16 on CPU
        self.native = NativeForward.for_model(self)  # the whole layer loop in C++ where a pass allows it

    def _local_kv(self) -> int:
        tp = 1 if self.group is None else torch.distributed.get_world_size(self.group)
        return self.spec.num_kv_heads // tp

    def new_cache(self, slots: int, max_len: int) -> KVCache:
        """A KVCache shaped for this model (this rank's KV heads)."""
        s = self.spec
        return KVCache(s.num_layers, slots, max_len, self._local_kv(), s.head_dim, self.dtype, self.device)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                slots: list[int], mask: torch.Tensor, lengths: list[int] | None = None,
                prefix_run: bool = True) -> torch.Tensor:
        """Run new tokens of B sequences through the decoder.

        Args:
            tokens: ``[B, T]`` int64, right-padded.
            positions: ``[B, T]`` int64 RoPE position ids (prefix length + depth for tree nodes).
            cache: their K/V are written at rows ``lengths[slot] + t`` of each slot.
            slots: B slot ids.
            mask: ``[B, 1, T, S]`` bool, True = may attend; S = max(length + T).
            lengths: B real segment lengths (<= T); given, the padding skips every matmul
                (``Ragged``) and its output rows are zeros.
            prefix_run: every row sees its cached columns ``[0, cache.lengths[slot])`` as a leading
                run (all, none or the first few), as ``attention.build_batch``'s masks do. False for
                the draft's level passes, whose rows see ancestors cached by earlier levels: on CUDA
                they attend with the dense mask, not the tree-attention kernel (which assumes the run).
        Returns:
            hidden states ``[B, T, hidden]`` after the final norm.
        """
        B, T = tokens.shape
        rag = Ragged.of(lengths, B, T, tokens.device)
        if rag is not None:  # [1, N]: only real rows go through the projections
            tokens, positions = rag.pack(tokens), rag.pack(positions)
        x = self.w["embed"][tokens]  # [B, T, H] or [1, N, H] (a copy: the layers add into it in place)
        cos, sin = self._cos[positions], self._sin[positions]  # [B, T, D] or [1, N, D]
        starts = [cache.lengths[s] for s in slots]
        exact = self.exact_fits(T, mask.shape[-1] - T, B)
        if exact and self.native is not None:  # one C++ call for every layer (None: a kernel it cannot run)
            out = self.native.run(x.reshape(-1, x.shape[-1]), cos.reshape(-1, cos.shape[-1]),
                                  sin.reshape(-1, sin.shape[-1]), cache, slots, starts, mask, lengths or [T] * B,
                                  None if rag is None else rag.rows)
            if out is not None:
                out = out.view(x.shape)
                return out if rag is None else rag.unpack(out)
        attend = (ExactAttention(self.exact_lib, mask, slots, cache.max_len) if exact
                  else tree_attention_for(mask, cache, slots, prefix_run))  # built once, shared by the layers
        delta = None  # the last block's MLP output, added into x by the next norm
        for layer in range(self.spec.num_layers):
            x, delta = self._block(layer, x, delta, cos, sin, cache, slots, starts, mask, rag, attend)
        out = self.ops.add_rms_norm(x, delta, self.w["norm"], self.spec.rms_eps)[1]
        return out if rag is None else rag.unpack(out)

    def exact_fits(self, rows: int, cols: int, batch: int = 1) -> bool:
        """Whether a pass of ``batch`` sequences whose longest segment has ``rows`` rows after ``cols`` KV
        columns (the longest prefix) attends by ``ExactAttention``: a library is set, and ``exact_limits``
        allows it, or, with several sequences, ``exact_batch_limits`` does (``_within``)."""
        if self.exact_lib is None:
            return False
        return _within(self.exact_limits, rows, cols) or (batch > 1 and _within(self.exact_batch_limits, rows, cols))

    def _block(self, i: int, x, delta, cos, sin, cache: KVCache, slots, starts, mask, rag: Ragged | None, attend):
        """One pre-norm transformer block on the residual stream ``x + delta`` (``[B, T, H]``,
        or ``[1, N, H]`` packed by ``rag``); returns (its input residual stream, its MLP output),
        whose sum is the block's output. ``attend``: this forward's attention callable (``attention.tree_attention_for``)
        or its :class:`ExactAttention`."""
        w, s, ops = self.w, self.spec, self.ops
        B, T, _ = x.shape
        x, h = ops.add_rms_norm(x, delta, w[f"layers.{i}.in_norm"], s.rms_eps)
        qkv = linear(h, w[f"layers.{i}.qkv.weight"], w.get(f"layers.{i}.qkv.bias"))
        q, k, v = ops.rope_qkv(qkv.view(B, T, -1, s.head_dim), self.local_heads, self._local_kv(), cos, sin)
        ks, vs = (rag.segments(k), rag.segments(v)) if rag is not None else (k, v)
        for b, slot in enumerate(slots):
            cache.write(i, slot, starts[b], ks[b], vs[b])
        if rag is None:
            attn = attend(q, cache, i, slots, mask)  # [B, T, heads * D]
        else:
            attn = rag.pack(attend(rag.unpack(q), cache, i, slots, mask))  # [1, N, heads * D]
        x, h = ops.add_rms_norm(x, self._reduce(linear(attn, w[f"layers.{i}.o.weight"])),
                                w[f"layers.{i}.post_norm"], s.rms_eps)
        return x, self._reduce(linear(ops.silu_mul(linear(h, w[f"layers.{i}.gate_up.weight"])),
                                      w[f"layers.{i}.down.weight"]))

    def _reduce(self, y: torch.Tensor) -> torch.Tensor:
        """Sum row-parallel partial outputs across tensor-parallel ranks (no-op at TP=1)."""
        if self.group is not None:
            torch.distributed.all_reduce(y, group=self.group)
        return y

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """LM head: ``[N, H]`` -> fp32 logits ``[N, V]`` (or ``[N, K]`` with ``head_ids``)."""
        return linear(hidden, self.head_weight).float()
