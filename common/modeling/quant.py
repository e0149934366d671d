"""Weight-only int4 / int8 quantization of projection matrices (torch's CPU kernels).

A decode step on CPU is memory-bandwidth bound (each step streams all weights), so 4- or
8-bit weights make it cheaper. The draft uses int4 (``draft_quantization``); the main
model may use int8 or int4 (``main_quantization``). Speculation stays lossless with
respect to the *served* model: with a quantized main model every token is decided by that
quantized model, so greedy output equals its own plain decoding (not the bf16 model's).

Schemes (weight-only; activations and the KV cache keep the model dtype):

- int4: asymmetric, per group of ``GROUP`` input channels (as in GPTQ/AWQ and gpt-fast's
  int4 path): ``w ~= q * scale + min`` with ``q`` in 0..15, packed by
  ``torch.ops.aten._convert_weight_to_int4pack_for_cpu``.
- w4a8: int4's weights (same codes, scales and lows), with every projection's activations
  rounded to int8 per row and group of ``GROUP`` channels inside treespec's W4A8 kernel
  (``native.PackedGemmLibrary.pack_w4a8``; llama.cpp's Q4 x Q8 dot products do the same). Not
  weight-only: the served model is the W4A8 one, every pass of every row count runs the same
  kernel, and a row's result does not depend on the rows beside it (integer dot products), so
  speculation stays lossless with respect to it. Needs the kernel's AVX512-VNNI or AVX2 variant.
- int8: symmetric, one scale per output channel (gpt-fast's ``WeightOnlyInt8QuantHandler``;
  LLM.int8()'s vector-wise quantization, Dettmers et al. 2022, without its outlier
  decomposition): ``w ~= q * scale``, ``q`` in -127..127, ``scale = max|w_row| / 127``,
  multiplied by ``torch.ops.aten._weight_int8pack_mm``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from common.config import MAIN_QUANTIZATIONS

GROUP = 64  # input channels per scale/zero pair
INNER_K_TILES = 2  # packing layout expected by the CPU int4 kernel
INT4_MAX_ROWS = 16  # rows up to which the int4 kernel beats bf16 here (measured: equal at 16)
INT8_MAX_ROWS = 16  # above: int8 -> dtype cast + dense GEMM (measured: int8 kernel 2x slower at 64 rows)
MAIN_SCHEMES = MAIN_QUANTIZATIONS


def int4_supported(weight: torch.Tensor) -> bool:
    """True when ``weight`` ([N, K]) can use the CPU int4 kernel (K % GROUP == 0, N % 16 == 0)."""
    n, k = weight.shape
    return weight.device.type == "cpu" and k % GROUP == 0 and n % 16 == 0


def quantize_int4(weight: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``weight`` ``[N, K]`` -> (packed weight, scales_and_zeros ``[K/GROUP, N, 2]``
    in ``dtype``, which must be the activations' dtype: the kernel takes bf16, fp16 or fp32)."""
    q, sz = int4_codes(weight, dtype)
    return _torch_int4_pack(q), sz


def _torch_int4_pack(q: torch.Tensor) -> torch.Tensor:
    """Codes ``[N, K]`` (0..15) in the layout of torch's CPU int4 kernel."""
    return torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), INNER_K_TILES)


def int4_codes(weight: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor]:
    """The int4 codes of ``weight`` ``[N, K]``: (``q`` ``[N, K]`` uint8 in 0..15, scales_and_zeros
    ``[K/GROUP, N, 2]`` in ``dtype``) with ``w ~= (q - 8) * scale + zero`` per group of GROUP
    input channels (what :func:`quantize_int4` packs for torch's kernel, and what the packed
    kernel of ``native.py`` packs for its own)."""
    n, k = weight.shape
    w = weight.float().reshape(n, k // GROUP, GROUP)
    lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp(min=1e-6)
    q = ((w - lo) / scale).round().clamp(0, 15).to(torch.uint8).reshape(n, k)
    zero = lo + scale * 8  # the kernel computes (q - 8) * scale + zero
    return q, torch.cat([scale, zero], dim=-1).permute(1, 0, 2).contiguous().to(dtype)


def dequantize_int4(q: torch.Tensor, scales_zeros: torch.Tensor) -> torch.Tensor:
    """The ``[N, K]`` matrix that int4 codes stand for, in ``scales_zeros``'s dtype:
    ``(q - 8) * scale + zero`` per group of GROUP input channels, computed in fp32 (the
    formula torch's int4 kernel evaluates) and rounded once to that dtype (exact in fp32;
    within half a bf16 step of the kernel's fp32 values in bf16). ``q``: ``[N, K]`` uint8
    codes, ``scales_zeros``: ``[K/GROUP, N, 2]``."""
    n, k = q.shape
    sz = scales_zeros.float().permute(1, 0, 2)  # [N, K/G, 2]
    w = (q.reshape(n, k // GROUP, GROUP).float() - 8) * sz[..., :1] + sz[..., 1:]  # [N, K/G, G]
    return w.reshape(n, k).to(scales_zeros.dtype)


def int4_linear(x: torch.Tensor, packed: torch.Tensor, scales_zeros: torch.Tensor) -> torch.Tensor:
    """``x`` ``[..., K]`` times a packed int4 ``[N, K]`` weight -> ``[..., N]`` (x's dtype,
    which must be ``scales_zeros``'s)."""
    shape = x.shape
    y = torch.ops.aten._weight_int4pack_mm_for_cpu(x.reshape(-1, shape[-1]), packed, GROUP, scales_zeros)
    return y.reshape(*shape[:-1], y.shape[-1])


@dataclass(frozen=True)
class Int4Weight:
    """A ``[N, K]`` projection matrix in the CPU int4 layout.

    ``packed``: the kernel's packed 4-bit weight; ``scales_zeros``: ``[K/GROUP, N, 2]`` bf16;
    ``dense``: a bf16 ``[N, K]`` copy or None (the draft's: its original weights; an int4
    main model's: its own dequantized weights, ``dequantize_int4``). With the dense copy, calls over more
    than ``INT4_MAX_ROWS`` rows (prefill, compute bound) use the bf16 GEMM instead.
    ``codes``: the ``[N, K]`` uint8 codes (0..15) until a kernel plan repacks them for the
    packed kernel (``kernels.prepare``), then dropped (``kernels.planned``).
    ``exact``: every kernel must compute with bf16 activations (a main model's weight: what
    it serves); False (a draft model's weight) also admits the W4A8 kernel, which rounds the
    activations to int8 (``native.PackedGemmLibrary.pack_w4a8``)."""

    packed: torch.Tensor
    scales_zeros: torch.Tensor
    dense: torch.Tensor | None = None
    codes: torch.Tensor | None = None
    exact: bool = True

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ W.T + bias``: ``x`` ``[..., K]`` bf16 -> ``[..., N]`` bf16."""
        if self.dense is not None and x.numel() // x.shape[-1] > INT4_MAX_ROWS:
            return F.linear(x, self.dense, bias)
        y = int4_linear(x, self.packed, self.scales_zeros)
        return y if bias is None else y + bias

    def to(self, device) -> "Int4Weight":
        """The same weight on ``device``."""
        dense = None if self.dense is None else self.dense.to(device)
        codes = self.codes if torch.device(device).type == "cpu" else None  # only CPU has the packed kernel
        return Int4Weight(self.packed.to(device), self.scales_zeros.to(device), dense, codes, self.exact)

    @property
    def nbytes(self) -> int:
        """Bytes held (packed weight, scales/zeros and the dense copy if kept)."""
        return sum(t.nbytes for t in (self.packed, self.scales_zeros, self.dense, self.codes) if t is not None)


def _int4_weight(weight: torch.Tensor, dtype: torch.dtype, dense: torch.Tensor | None = None,
                 exact: bool = True) -> Int4Weight:
    """An Int4Weight of ``weight`` holding torch's packing and (CPU only) the codes for ours."""
    q, sz = int4_codes(weight, dtype)
    return Int4Weight(_torch_int4_pack(q), sz, dense, q if weight.device.type == "cpu" else None, exact)


def quantize_int8(weight: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8: ``weight`` ``[N, K]`` -> (``q`` ``[N, K]`` int8 in
    -127..127, ``scales`` ``[N]`` in ``dtype``) with ``weight ~= q * scales[:, None]``."""
    w = weight.float()
    scale = (w.abs().amax(dim=1) / 127).clamp(min=1e-8)  # [N]
    q = (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8)
    return q, scale.to(dtype)


@dataclass(frozen=True)
class Int8Weight:
    """A ``[N, K]`` projection matrix as int8 ``q`` ``[N, K]`` and per-row ``scales`` ``[N]``
    (the activations' dtype); it computes ``y = (x @ q.T) * scales``.

    Up to ``INT8_MAX_ROWS`` rows (decode, tree verification) on CPU: torch's
    ``_weight_int8pack_mm`` kernel (it streams 1 byte per weight). More rows (prefill,
    compute bound), or another device: ``q`` is cast to the activations' dtype (exact:
    int8 values are representable in bf16/fp16/fp32) for a dense GEMM and the output is
    scaled, the same product without a dense copy in memory."""

    q: torch.Tensor
    scales: torch.Tensor

    @property
    def shape(self) -> tuple[int, int]:
        """``(N, K)`` of the matrix it stands for."""
        return tuple(self.q.shape)

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ W.T + bias``: ``x`` ``[..., K]`` (``scales``'s dtype) -> ``[..., N]``."""
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])  # [M, K]
        if x.device.type == "cpu" and 0 < x2.shape[0] <= INT8_MAX_ROWS:
            y = torch.ops.aten._weight_int8pack_mm(x2, self.q, self.scales)
        else:
            y = F.linear(x2, self.q.to(x.dtype)) * self.scales
        y = y.reshape(*shape[:-1], y.shape[-1])
        return y if bias is None else y + bias

    def to(self, device) -> "Int8Weight":
        """The same weight on ``device``."""
        return Int8Weight(self.q.to(device), self.scales.to(device))

    @property
    def nbytes(self) -> int:
        """Bytes held (int8 weight plus scales)."""
        return self.q.nbytes + self.scales.nbytes


def quantize_weights(weights: dict[str, torch.Tensor], keep_dense: bool = False) -> dict[str, object]:
    """Replace every projection matrix ``*.weight`` that the kernel supports with an
    :class:`Int4Weight`; embeddings, norms, biases and the LM head stay as they are.

    ``keep_dense`` keeps the bf16 matrix in ``Int4Weight.dense``. The int4
    kernel wins for the few rows of a decode / tree-level step (bandwidth bound) but loses
    to the bf16 GEMM on long prefills (compute bound), so ``model.linear`` picks per call.
    Memory: dense adds 2 bytes per weight. These are a draft model's weights: its kernels need not
    compute exactly (``Int4Weight.exact`` False admits the W4A8 kernel)."""
    out: dict[str, object] = {}
    for name, t in weights.items():
        if name.endswith(".weight") and t.dim() == 2 and int4_supported(t):
            out[name] = _int4_weight(t, torch.bfloat16, dense=t if keep_dense else None, exact=False)
        else:
            out[name] = t
    return out


def quantize_main_weights(weights: dict[str, torch.Tensor], scheme: str, dtype: torch.dtype,
                          int4_dense: bool = True) -> dict[str, object]:
    """The main model's weights with every layer projection matrix (``*.weight``, 2-D)
    quantized by ``scheme`` (``int8`` -> :class:`Int8Weight`, ``int4`` ->
    :class:`Int4Weight`, where the kernel supports the shape, whose dense copy (``int4_dense``)
    is its own dequantized weights rounded to ``dtype``: multi-row passes (tree verification, prefill) run on that
    copy where the kernel plan measured it faster, at 2 more bytes per weight while it is kept);
    embeddings, norms, biases and the LM head stay in ``dtype``. Scales are kept in
    ``dtype`` (the activations' dtype). ``w4a8`` -> the W4A8 kernel's packed weights
    (``native.PackedWeight``, module docstring). ``none`` returns ``weights`` unchanged.
    Raises ValueError for an unknown scheme, or for ``w4a8`` without the kernel's VNNI or AVX2 variant."""
    if scheme not in MAIN_SCHEMES:
        raise ValueError(f"main_quantization must be one of {', '.join(MAIN_SCHEMES)}, got {scheme!r}")
    if scheme == "none":
        return weights
    lib = _w4a8_library() if scheme == "w4a8" else None
    out: dict[str, object] = {}
    for name, t in weights.items():
        if not (name.endswith(".weight") and t.dim() == 2):
            out[name] = t
        elif lib is not None:  # a shape int4 cannot pack runs the packed bf16 kernel, row-independent as well
            out[name] = lib.pack_w4a8(*int4_codes(t, dtype)) if int4_supported(t) else lib.pack(t.to(torch.bfloat16))
        elif scheme == "int8":
            out[name] = Int8Weight(*quantize_int8(t, dtype))
        elif int4_supported(t):
            w4 = _int4_weight(t, dtype)  # dense: the int4 weights widened to dtype (rounded once)
            out[name] = replace(w4, dense=dequantize_int4(w4.codes, w4.scales_zeros)) if int4_dense else w4
        else:
            out[name] = t
    return out


def _w4a8_library():
    """treespec's kernel library with a served W4A8 variant (AVX512-VNNI or AVX2); ValueError naming
    what is missing."""
    from common.modeling.native import library  # torch + ctypes; only a w4a8 main needs it
    lib = library()
    if lib is None or not lib.w4a8_fast:
        found = "no native kernel library (g++ missing or TREESPEC_NATIVE_KERNEL=0)" if lib is None else \
            f"its {lib.w4a8_variant} variant (this CPU lacks both avx512_vnni and avx2 + fma)"
        raise ValueError(f"main_quantization=w4a8 needs treespec's W4A8 kernel built for AVX512-VNNI or AVX2; "
                         f"found {found}. Use main_quantization=int4 on this host.")
    return lib


def weight_bytes(weights: dict[str, object]) -> int:
    """Bytes held by a weights dict (tensors and quantized weights; a tied LM head that
    shares the embedding's storage is counted once)."""
    seen, total = set(), 0
    for w in weights.values():
        key = w.data_ptr() if isinstance(w, torch.Tensor) else id(w)
        if key not in seen:
            seen.add(key)
            total += w.nbytes
    return total
