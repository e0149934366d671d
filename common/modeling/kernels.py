"""Projection-matmul kernels, and the per-(weight format, row bucket) choice among them.

A projection ``y = x @ W.T + b`` can run through several CPU kernels that give the same
result up to float rounding but differ in speed by host, weight shape and row count
(tokens in the pass: 1 for a plain decode step, 8-32 for a tree, hundreds for prefill):

* ``linear``: ``F.linear`` on the dense ``[N, K]`` weight (the default everywhere);
* ``onednn``: oneDNN's linear on a weight reordered once, at start, into its blocked
  layout (``torch.ops.mkldnn._reorder_linear_weight`` + ``_linear_pointwise``, what
  Inductor's CPU freezing pass emits); ``F.linear`` reorders bf16 weights on every call;
* ``int4``: the CPU int4 kernel of an :class:`~common.modeling.quant.Int4Weight`;
* ``dense``: ``F.linear`` on an int4 weight's kept bf16 copy (``Int4Weight.dense``);
* ``native``: the weight object's own ``linear`` (any other weight class, e.g. int8);
* ``packed``: treespec's own kernel (``native.py``, ``csrc/packed_gemm.cpp``) on a bf16,
  int8 or int4 weight repacked once into 64-channel panels in huge pages (bf16: AMX-BF16 tiles
  from the row count ``amx.py`` measured, where the CPU has them); a candidate wherever
  the library built on this host (needs a C++ compiler);
* ``w4a8``: treespec's W4A8 kernel (``csrc/w4a8_gemm.cpp``: int8 activations, VNNI integer
  dot products; AMX-INT8 tiles from the row count ``amx.py`` measured) on an int4 weight that
  need not be exact (``Int4Weight.exact`` False: a draft model's), where the library has its
  AVX512-VNNI or AVX2 variant.

:func:`choose` turns timings (``kernel_probe.py`` measures them at worker start) into a
ladder per format; :func:`apply_plan` wraps each projection weight in a
:class:`PlannedWeight` that holds only the operand forms its ladder uses.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Callable

import torch
import torch.nn.functional as F

from common.modeling.native import library
from common.modeling.quant import GROUP, Int4Weight, Int8Weight, int4_linear

ROW_BUCKETS = (1, 4, 8, 16, 32, 128)  # rows (tokens per pass) probed; 128 stands for prefill
MIN_GAIN = 0.05  # a kernel replaces the format's default only when >= 5% faster (noise guard)
PROJECTIONS = ("qkv", "o", "gate_up", "down")  # per-layer weights: layers.{i}.{name}.weight

Timings = dict[tuple[str, int, str], float]  # (format, rows, kernel) -> ms for one model pass


def _linear(x, w, bias):
    return F.linear(x, w, bias)


def _onednn(x, packed, bias):
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def _int4(x, w: Int4Weight, bias):
    y = int4_linear(x, w.packed, w.scales_zeros)
    return y if bias is None else y + bias


def _native(x, w, bias):
    return w.linear(x, bias)


KERNELS: dict[str, Callable] = {"linear": _linear, "onednn": _onednn, "int4": _int4, "dense": _linear,
                                "native": _native, "packed": _native, "w4a8": _native}
ONEDNN_DTYPES = (torch.bfloat16,)  # fp32 weights keep F.linear: reference runs stay bit-for-bit as before


def weight_format(w) -> str:
    """``"bfloat16"`` / ``"float32"`` / ... for a dense tensor, ``"int4"`` for an Int4Weight,
    else the weight class's lower-cased name (e.g. ``"int8weight"``)."""
    if isinstance(w, torch.Tensor):
        return str(w.dtype).removeprefix("torch.")
    return "int4" if isinstance(w, Int4Weight) else type(w).__name__.lower()


def dense_of(w) -> torch.Tensor | None:
    """The dense ``[N, K]`` matrix behind ``w``: itself, a kept ``.dense`` copy, or None."""
    return w if isinstance(w, torch.Tensor) else getattr(w, "dense", None)


def weight_shape(w) -> tuple[int, int]:
    """``(N, K)`` of a dense matrix, an Int4Weight (from its ``[K/GROUP, N, 2]`` scales) or a
    PlannedWeight."""
    dense = dense_of(w)
    if dense is not None:
        return tuple(dense.shape)
    if isinstance(w, Int4Weight):
        return w.scales_zeros.shape[1], w.scales_zeros.shape[0] * GROUP
    return tuple(w.shape)


def candidates(w) -> tuple[str, ...]:
    """Kernels that can run weight ``w``, the format's default first."""
    dense = dense_of(w)
    cpu_bf16 = dense is not None and dense.device.type == "cpu" and dense.dtype in ONEDNN_DTYPES
    onednn = ("onednn",) if cpu_bf16 and _onednn_bf16_available() else ()
    if isinstance(w, torch.Tensor):
        return ("linear", *onednn, *(("packed",) if cpu_bf16 and w.dim() == 2 and library() is not None else ()))
    if isinstance(w, Int8Weight):
        return ("native", "packed") if _int8_packable(w) else ("native",)
    if isinstance(w, Int4Weight):  # its bf16 copy (dense / onednn), its codes repacked (packed)
        packed = ("packed",) if (w.codes is not None and w.codes.device.type == "cpu"
                                 and w.scales_zeros.dtype == torch.bfloat16 and library() is not None) else ()
        w4a8 = ("w4a8",) if packed and not w.exact and _w4a8_available() else ()
        return ("int4", *(("dense", *onednn) if onednn else ()), *packed, *w4a8)
    return ("native", "dense", *onednn) if onednn else ("native",)


def _onednn_bf16_available() -> bool:
    """oneDNN's bf16 linear runs on this CPU: torch built with it, and the CPU has what its bf16
    path needs (AVX512 BW/VL/DQ or AVX-NE-CONVERT). On an AVX2-only CPU (an AMD EPYC Zen 2,
    2026-12-05) the weight reorder raises ``RuntimeError: ... bf16 path needs the cpu support``,
    which took the worker down at start; there the bf16 weights keep ``linear`` and ``packed``."""
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def _w4a8_available() -> bool:
    """The W4A8 kernel's AVX512-VNNI or AVX2 variant built on this host (its portable variant is
    only a reference), unless ``TREESPEC_W4A8=0`` (an A/B switch for measurements)."""
    return os.environ.get("TREESPEC_W4A8", "1") != "0" and library().w4a8_fast


def _int8_packable(w: Int8Weight) -> bool:
    """An int8 CPU weight whose scales are bf16 (the activations the packed kernel takes; fp32
    reference runs keep torch's kernels, bit for bit as before)."""
    return w.q.device.type == "cpu" and w.scales.dtype == torch.bfloat16 and library() is not None


def prepare(kernel: str, w):
    """The operand ``kernel`` runs on for weight ``w`` (the oneDNN reorder copies the weight)."""
    if kernel == "onednn":
        return torch.ops.mkldnn._reorder_linear_weight(dense_of(w))
    if kernel == "packed":
        if isinstance(w, Int8Weight):
            return library().pack_int8(w.q, w.scales)
        return library().pack_int4(w.codes, w.scales_zeros) if isinstance(w, Int4Weight) else library().pack(w)
    if kernel == "w4a8":
        return library().pack_w4a8(w.codes, w.scales_zeros)
    if kernel == "dense":
        return dense_of(w)
    if kernel == "int4":
        return replace(w, dense=None, codes=None)  # the dense copy lives on only if a step uses it
    return w


def pick(ladder: tuple[tuple[int, str], ...], rows: int) -> str:
    """The kernel of the first ``(max_rows, kernel)`` step with ``rows <= max_rows``; the last
    step's kernel above them all."""
    for max_rows, kernel in ladder:
        if rows <= max_rows:
            return kernel
    return ladder[-1][1]


def choose(timings: Timings, defaults: dict[str, str]) -> dict[str, tuple[tuple[int, str], ...]]:
    """Per format, the fastest kernel per row bucket as a ladder ``((max_rows, kernel), ...)``.

    ``defaults``: format -> its default kernel, kept unless another is ``MIN_GAIN`` faster
    (timing noise must not swap kernels). Likewise a bucket keeps the kernel of the bucket
    below unless another is ``MIN_GAIN`` faster: each kernel on a ladder holds its own copy
    of the weights, so a second copy must buy a real gain. Adjacent buckets with the same kernel merge;
    formats without timings get no ladder (they keep their default).
    """
    plans: dict[str, tuple[tuple[int, str], ...]] = {}
    for fmt, default in defaults.items():
        steps: list[tuple[int, str]] = []
        for rows in sorted({r for f, r, _ in timings if f == fmt}):
            times = {k: ms for (f, r, k), ms in timings.items() if f == fmt and r == rows}
            best = min(times, key=times.__getitem__)
            if default in times and times[best] > (1 - MIN_GAIN) * times[default]:
                best = default
            if steps and steps[-1][1] in times and times[best] > (1 - MIN_GAIN) * times[steps[-1][1]]:
                best = steps[-1][1]  # near-equal: keep the kernel below, not a second weight copy
            if steps and steps[-1][1] == best:
                steps[-1] = (rows, best)
            else:
                steps.append((rows, best))
        if steps:
            plans[fmt] = tuple(steps)
    return plans


class PlannedWeight:
    """A projection weight run by the kernel its ladder picks for the call's row count.

    ``ladder``: ``((max_rows, kernel), ...)`` from :func:`choose`; ``forms``: kernel ->
    operand (from :func:`prepare`), one per kernel on the ladder, so the original dense
    tensor is released when no step uses it. ``shape``: ``(N, K)``.
    """

    def __init__(self, w, ladder: tuple[tuple[int, str], ...]) -> None:
        self.ladder, self.format = ladder, weight_format(w)
        self.shape = weight_shape(w)
        self.forms = {k: prepare(k, w) for k in {k for _, k in ladder}}

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ W.T + bias``: ``x`` ``[..., K]`` -> ``[..., N]``, same dtype."""
        kernel = pick(self.ladder, x.numel() // x.shape[-1])
        return KERNELS[kernel](x, self.forms[kernel], bias)


def plannable(name: str) -> bool:
    """True for the per-layer projection matrices a plan may rewrap."""
    parts = name.split(".")
    return len(parts) == 4 and parts[0] == "layers" and parts[2] in PROJECTIONS and parts[3] == "weight"


def apply_plan(weights: dict, plans: dict[str, tuple[tuple[int, str], ...]]) -> None:
    """Wrap, in place, every projection of ``weights`` whose format has a non-trivial plan
    in a :class:`PlannedWeight` (one at a time, so each replaced tensor is freed before
    the next reorder: peak memory grows by one matrix, not by the model)."""
    for name in list(weights):
        if plannable(name):
            weights[name] = planned(weights[name], plans.get(weight_format(weights[name])))


def planned(w, ladder: tuple[tuple[int, str], ...] | None):
    """``w`` wrapped in a PlannedWeight, or ``w`` itself (an Int4Weight without its codes) when
    the ladder is missing, is the default kernel alone, or names a kernel that cannot run ``w``.
    An Int4Weight whose valid ladder is the int4 kernel alone also drops its dense copy (the
    probe measured int4 faster at every row count); without a ladder the copy stays, for
    ``Int4Weight.linear``'s fallback above ``INT4_MAX_ROWS`` rows."""
    allowed = candidates(w)
    if ladder is None or any(k not in allowed for _, k in ladder):
        return replace(w, codes=None) if isinstance(w, Int4Weight) else w  # int4 codes only live on to be repacked
    if {k for _, k in ladder} == {allowed[0]}:
        return replace(w, codes=None, dense=None) if isinstance(w, Int4Weight) else w
    return PlannedWeight(w, ladder)
