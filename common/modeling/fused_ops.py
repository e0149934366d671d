"""The element-wise ops of a decoder block: residual add + RMSNorm, rotary embedding, SwiGLU.

:class:`TorchOps` is the reference (any dtype and device; what transformers computes).
:class:`NativeOps` runs bf16 CPU tensors through treespec's C++ ops (``csrc/decoder_ops.cpp``,
built into the projection kernel's library by ``native.py``): one call per op instead of 4-12
torch kernels, computed in fp32 and rounded once. A 0.5B draft step over a few rows spends about
a third of its time in those small torch kernels' dispatch on a 2-core host.

``DecoderModel`` picks the ops once (:func:`for_model`): native for bf16 on CPU when the library
builds (``TREESPEC_NATIVE_KERNEL=0`` turns it off), torch otherwise, so fp32 reference runs keep
transformers' exact op order.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm (Zhang & Sennrich 2019, eq. 4) in fp32, cast back before the weight (as
    transformers' Qwen2RMSNorm). x: ``[..., H]``."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE (RoFormer, §3.4). x: ``[B, T, heads, D]``; cos/sin: ``[B, T, D]``."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, :, None] + rotated * sin[:, :, None]


class TorchOps:
    """Reference ops in torch; also the fallback of :class:`NativeOps` for other tensors."""

    name = "torch"

    def add_rms_norm(self, x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(``x + delta``, RMSNorm of it times ``weight``); x, delta: ``[..., H]``, weight ``[H]``.
        ``delta`` None: no add. ``x`` itself may be updated in place (callers pass their own)."""
        if delta is not None:
            x = x + delta
        return x, _rms_norm(x, weight, eps)

    def rope_qkv(self, qkv: torch.Tensor, heads: int, kv_heads: int, cos: torch.Tensor,
                 sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Split ``qkv`` ``[B, T, heads + 2 * kv_heads, D]`` into q ``[B, T, heads, D]``, k and v
        ``[B, T, kv_heads, D]``, with RoPE (cos/sin ``[B, T, D]``) applied to q and k."""
        q, k, v = qkv.split([heads, kv_heads, kv_heads], dim=2)
        return _rope(q, cos, sin), _rope(k, cos, sin), v

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """SwiGLU's product (Shazeer 2020, eq. 6): ``[..., 2I]`` -> ``silu(gate) * up`` ``[..., I]``."""
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up


class NativeOps(TorchOps):
    """The same ops through ``decoder_ops.cpp`` for contiguous bf16 CPU tensors (others fall
    back to torch). ``lib``: a loaded :class:`~common.modeling.native.PackedGemmLibrary`.
    Results differ from :class:`TorchOps` only by bf16 rounding (one rounding per op, not one
    per torch kernel); each row is computed alone, so results do not depend on batch size."""

    name = "native"

    def __init__(self, lib) -> None:
        self.lib = lib

    @staticmethod
    def _fits(*tensors: torch.Tensor) -> bool:
        return all(t.dtype == torch.bfloat16 and t.device.type == "cpu" and t.is_contiguous() for t in tensors)

    def add_rms_norm(self, x, delta, weight, eps):
        if not self._fits(x, weight) or (delta is not None and (not self._fits(delta) or delta.shape != x.shape)):
            return super().add_rms_norm(x, delta, weight, eps)
        h = x.shape[-1]
        out = torch.empty_like(x)
        self.lib.rms_norm(x.data_ptr(), 0 if delta is None else delta.data_ptr(), weight.data_ptr(),
                          out.data_ptr(), x.numel() // h, h, eps, torch.get_num_threads())
        return x, out

    def rope_qkv(self, qkv, heads, kv_heads, cos, sin):
        if not self._fits(qkv, cos, sin):
            return super().rope_qkv(qkv, heads, kv_heads, cos, sin)
        B, T, nh, D = qkv.shape
        self.lib.rope(qkv.data_ptr(), cos.data_ptr(), sin.data_ptr(), B * T, nh * D, heads + kv_heads, D,
                      torch.get_num_threads())
        return qkv.split([heads, kv_heads, kv_heads], dim=2)

    def silu_mul(self, gate_up):
        if not self._fits(gate_up):
            return super().silu_mul(gate_up)
        i = gate_up.shape[-1] // 2
        out = torch.empty(*gate_up.shape[:-1], i, dtype=gate_up.dtype)
        self.lib.silu_mul(gate_up.data_ptr(), out.data_ptr(), gate_up.numel() // (2 * i), i, torch.get_num_threads())
        return out


def for_model(dtype: torch.dtype, device: str) -> TorchOps:
    """:class:`NativeOps` for bf16 on CPU when treespec's C++ library loads, else :class:`TorchOps`."""
    if dtype == torch.bfloat16 and str(device) == "cpu":
        from common.modeling.native import library
        lib = library()
        if lib is not None:
            return NativeOps(lib)
    return TorchOps()
