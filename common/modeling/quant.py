"""Weight-only int4 quantization for the draft model (CPU kernel).

The draft is memory-bandwidth bound on CPU (each step streams all its weights), so
4-bit weights make a draft step ~3x cheaper. Speculation stays lossless: only the
*draft* is quantized; the main model that decides every token is untouched.
Scheme: asymmetric, per group of ``GROUP`` input channels (as in GPTQ/AWQ and gpt-fast's
int4 path): ``w ~= q * scale + min`` with ``q`` in 0..15, packed by
``torch.ops.aten._convert_weight_to_int4pack_for_cpu``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

GROUP = 64  # input channels per scale/zero pair
INNER_K_TILES = 2  # packing layout expected by the CPU int4 kernel
INT4_MAX_ROWS = 16  # rows up to which the int4 kernel beats bf16 here (measured: equal at 16)


def int4_supported(weight: torch.Tensor) -> bool:
    """True when ``weight`` ([N, K]) can use the CPU int4 kernel (K % GROUP == 0, N % 8 == 0)."""
    n, k = weight.shape
    return weight.device.type == "cpu" and k % GROUP == 0 and n % 8 == 0


def quantize_int4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``weight`` ``[N, K]`` -> (packed weight, scales_and_zeros ``[K/GROUP, N, 2]`` bf16)."""
    n, k = weight.shape
    w = weight.float().reshape(n, k // GROUP, GROUP)
    lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp(min=1e-6)
    q = ((w - lo) / scale).round().clamp(0, 15).to(torch.int32).reshape(n, k)
    zero = lo + scale * 8  # the kernel computes (q - 8) * scale + zero
    sz = torch.cat([scale, zero], dim=-1).permute(1, 0, 2).contiguous().to(torch.bfloat16)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, INNER_K_TILES)
    return packed, sz


def int4_linear(x: torch.Tensor, packed: torch.Tensor, scales_zeros: torch.Tensor) -> torch.Tensor:
    """``x`` ``[..., K]`` bf16 times a packed int4 ``[N, K]`` weight -> ``[..., N]`` bf16."""
    shape = x.shape
    y = torch.ops.aten._weight_int4pack_mm_for_cpu(x.reshape(-1, shape[-1]), packed, GROUP, scales_zeros)
    return y.reshape(*shape[:-1], y.shape[-1])


@dataclass(frozen=True)
class Int4Weight:
    """A ``[N, K]`` projection matrix in the CPU int4 layout.

    ``packed``: the kernel's packed 4-bit weight; ``scales_zeros``: ``[K/GROUP, N, 2]`` bf16;
    ``dense``: the bf16 ``[N, K]`` original or None. With the dense copy, calls over more
    than ``INT4_MAX_ROWS`` rows (prefill, compute bound) use the bf16 GEMM instead."""

    packed: torch.Tensor
    scales_zeros: torch.Tensor
    dense: torch.Tensor | None = None

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ W.T + bias``: ``x`` ``[..., K]`` bf16 -> ``[..., N]`` bf16."""
        if self.dense is not None and x.numel() // x.shape[-1] > INT4_MAX_ROWS:
            return F.linear(x, self.dense, bias)
        y = int4_linear(x, self.packed, self.scales_zeros)
        return y if bias is None else y + bias

    def to(self, device) -> "Int4Weight":
        """The same weight on ``device``."""
        dense = None if self.dense is None else self.dense.to(device)
        return Int4Weight(self.packed.to(device), self.scales_zeros.to(device), dense)


def quantize_weights(weights: dict[str, torch.Tensor], keep_dense: bool = False) -> dict[str, object]:
    """Replace every projection matrix ``*.weight`` that the kernel supports with an
    :class:`Int4Weight`; embeddings, norms, biases and the LM head stay as they are.

    ``keep_dense`` keeps the bf16 matrix in ``Int4Weight.dense``. The int4
    kernel wins for the few rows of a decode / tree-level step (bandwidth bound) but loses
    to the bf16 GEMM on long prefills (compute bound), so ``model.linear`` picks per call.
    Memory: dense adds 2 bytes per weight."""
    out: dict[str, object] = {}
    for name, t in weights.items():
        if name.endswith(".weight") and t.dim() == 2 and int4_supported(t):
            out[name] = Int4Weight(*quantize_int4(t), dense=t if keep_dense else None)
        else:
            out[name] = t
    return out
