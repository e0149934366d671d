"""One native call per decoder pass (``csrc/decoder_forward.cpp``) where the pass allows it.

``DecoderModel.forward`` runs its layers in Python: per layer about ten calls into the C++ kernels
(projections, norms, RoPE, the KV write, attention), each with 5-15 us of argument checks, tensor
allocation and ctypes dispatch. For a 0.5B draft level that is about 2 ms of a 10 ms pass on a
2-core host. :class:`NativeForward` hands the whole layer loop to C++, which calls the same kernels
with the same arguments in the same order, so hidden states and KV rows are bit for bit those of
the Python loop (``tests/common/modeling/test_native_forward.py``).

A pass takes this path only when every step of it is one of those kernels: bf16 activations on the
CPU with treespec's element-wise ops (``fused_ops.NativeOps``), attention by ``ExactAttention`` (the
draft's small passes, a W4A8 main), every projection a ``native.PackedWeight`` for this row count
(its kernel plan's pick), even input widths and no tensor parallelism. Anything else returns None and
the Python loop runs. ``TREESPEC_NATIVE_FORWARD=0`` turns the path off (an A/B switch).
"""

from __future__ import annotations

import ctypes
import math
import os

import torch

from common.modeling.attention import visible_columns
from common.modeling.kernels import PlannedWeight, pick
from common.modeling.native import PackedWeight

KINDS = {"bf16": 0, "int8": 1, "int4": 2, "w4a8": 3}  # decoder_forward.cpp's Proj.kind
PROJECTIONS = ("qkv", "o", "gate_up", "down")  # its Proj order within a layer


def bind(lib) -> None:
    """Declare ``treespec_decoder_forward``'s argument types on a loaded library's ctypes handle."""
    fn = lib._lib.treespec_decoder_forward
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    fn.argtypes = ([ptr] * 8 + [i64] * 2 + [ptr] * 4 + [i64] * 7 + [ctypes.c_float] * 2 + [ctypes.c_int])
    fn.restype = None
    lib.decoder_forward = fn


def _form(weight, rows: int) -> PackedWeight | None:
    """The packed operand a projection runs on for ``rows`` rows, or None (another kernel)."""
    if isinstance(weight, PlannedWeight):
        weight = weight.forms[pick(weight.ladder, rows)]
    return weight if isinstance(weight, PackedWeight) and weight.k % 2 == 0 else None


class NativeForward:
    """The native layer loop for one :class:`~common.modeling.model.DecoderModel` (``model``) and
    its kernel library (``lib``, a loaded ``native.PackedGemmLibrary``). Projection tables are built
    per kernel choice (a plan may switch kernels with the row count) and kept with the tensors they
    point into (biases converted to bf16)."""

    def __init__(self, model, lib) -> None:
        self.model, self.lib = model, lib
        self._tables: dict[tuple, tuple[torch.Tensor, list[torch.Tensor]] | None] = {}  # picked kernels -> table
        self._ladders: tuple | None = None  # the projections' distinct kernel ladders (table())
        w = model.w
        norms = [w[f"layers.{i}.{n}"] for i in range(model.spec.num_layers) for n in ("in_norm", "post_norm")]
        self._norm_refs = [t.contiguous() for t in norms + [w["norm"]]]
        self.norms = torch.tensor([t.data_ptr() for t in self._norm_refs], dtype=torch.int64)

    @classmethod
    def for_model(cls, model) -> "NativeForward | None":
        """A NativeForward when ``model`` can ever take the path (bf16 CPU model with native element-wise
        ops, no tensor parallelism, a library with the entry point), else None."""
        lib = getattr(model.ops, "lib", None)
        if (os.environ.get("TREESPEC_NATIVE_FORWARD", "1") == "0" or lib is None or model.group is not None
                or model.dtype != torch.bfloat16 or str(model.device) != "cpu"
                or not hasattr(lib._lib, "treespec_decoder_forward")):
            return None
        if not hasattr(lib, "decoder_forward"):
            bind(lib)
        return cls(model, lib)

    def table(self, rows: int) -> torch.Tensor | None:
        """``[layers * 4 * 7]`` int64 projection descriptors for a pass of ``rows`` rows, or None when
        some projection runs on a kernel other than the packed ones. Built once per combination of the
        kernels the projections' plans pick for ``rows`` (a model's projections share one or two
        ladders, read at the first call, when the kernel plan is installed)."""
        if self._ladders is None:
            weights = [self.model.w[f"layers.{i}.{n}.weight"] for i in range(self.model.spec.num_layers)
                       for n in PROJECTIONS]
            self._ladders = tuple(sorted({w.ladder for w in weights if isinstance(w, PlannedWeight)}))
        key = tuple(pick(ladder, rows) for ladder in self._ladders)
        if key not in self._tables:
            forms = []
            for i in range(self.model.spec.num_layers):
                for name in PROJECTIONS:
                    form = _form(self.model.w[f"layers.{i}.{name}.weight"], rows)
                    forms.append((form, self.model.w.get(f"layers.{i}.{name}.bias")))
            self._tables[key] = None if any(f is None for f, _ in forms) else self._build(forms)
        built = self._tables[key]
        return None if built is None else built[0]

    def _build(self, forms) -> tuple[torch.Tensor, list[torch.Tensor]]:
        keep, rows = [], []
        amx = {"bf16": self.lib.bf16_amx_rows if self.lib.bf16_amx else 0,
               "w4a8": self.lib.w4a8_amx_rows if self.lib.w4a8_amx else 0}
        for form, bias in forms:
            b = None if bias is None else bias.to(torch.bfloat16).contiguous()
            keep += [t for t in (form.data, form.scales, b) if t is not None]
            rows.append([KINDS[form.kind], form.data.data_ptr(), 0 if form.scales is None else form.scales.data_ptr(),
                         0 if b is None else b.data_ptr(), form.n, form.k, amx.get(form.kind, 0)])
        return torch.tensor(rows, dtype=torch.int64).reshape(-1), keep

    def run(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache, slots: list[int],
            starts: list[int], mask: torch.Tensor, lengths: list[int],
            rows: torch.Tensor | None = None) -> torch.Tensor | None:
        """All layers and the final norm over packed rows: ``x`` ``[N, H]`` bf16 embeddings (overwritten
        with the residual stream), ``cos``/``sin`` ``[N, D]``; segment b (``lengths[b]`` rows, slot
        ``slots[b]``) writes its K/V at ``starts[b]`` on and sees the columns ``mask[b, 0, t]``
        (``[B, 1, T, S]`` bool) allows. ``rows``: the real rows' flat indices ``b * T + t``
        (``Ragged.rows``; None: every row is real). Returns the hidden states ``[N, H]`` bf16, or None
        (nothing done) when a projection's kernel for N rows is not a packed one."""
        s, N = self.model.spec, x.shape[0]
        table = self.table(N)
        if table is None:
            return None
        cols, offsets = visible_columns(mask, cache.max_len, rows)
        seg = torch.tensor(lengths, dtype=torch.int64)
        row_slot = torch.tensor(slots, dtype=torch.int64).repeat_interleave(seg)
        row_pos = (torch.tensor(starts, dtype=torch.int64).repeat_interleave(seg)
                   + torch.cat([torch.arange(n) for n in lengths]))
        out = torch.empty_like(x)
        kv = cache.k.shape
        self.lib.decoder_forward(
            x.data_ptr(), out.data_ptr(), table.data_ptr(), self.norms.data_ptr(), cos.data_ptr(), sin.data_ptr(),
            cache.k.data_ptr(), cache.v.data_ptr(), kv[1], cache.max_len, row_slot.data_ptr(), row_pos.data_ptr(),
            offsets.data_ptr(), cols.data_ptr(), N, s.num_layers, s.hidden_size, self.model.local_heads, kv[3],
            s.head_dim, s.intermediate_size, s.rms_eps, 1.0 / math.sqrt(s.head_dim), torch.get_num_threads())
        return out
