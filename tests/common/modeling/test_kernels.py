"""Matmul kernels and the per-(format, rows) choice among them."""

from dataclasses import replace

import torch
import torch.nn.functional as F

from common.modeling import kernels
from common.modeling.kernels import (KERNELS, PlannedWeight, apply_plan, candidates, choose, pick, planned, prepare,
                                     weight_format, weight_shape)
from common.modeling.native import library
from common.modeling.quant import quantize_main_weights, quantize_weights

ROWS = (1, 3, 8, 16, 33)
LIB = library()
W4A8 = ("w4a8",) if LIB is not None and LIB.w4a8_fast else ()  # the draft's kernel, where VNNI or AVX2 exists
ONEDNN = ("onednn",) if kernels._onednn_bf16_available() else ()  # oneDNN's bf16 path: AVX512 BW/VL/DQ or AVX-NE-CONVERT
FAST = "onednn" if ONEDNN else "packed"  # a non-default bf16 kernel this host runs (packed: CI has g++)


def _weights(dtype=torch.bfloat16, keep_dense=True) -> dict:
    g = torch.Generator().manual_seed(0)
    w = {"layers.0.qkv.weight": torch.randn(96, 128, generator=g) * 0.05,
         "layers.0.down.weight": torch.randn(128, 192, generator=g) * 0.05,
         "layers.0.in_norm": torch.ones(128), "embed": torch.randn(40, 128, generator=g)}
    w = {k: v.to(dtype) for k, v in w.items()}
    return quantize_weights(w, keep_dense=keep_dense) if dtype == torch.bfloat16 and keep_dense is not None else w


class TestCandidates:
    def test_onednn_is_offered_exactly_where_its_bf16_reorder_runs(self):
        """oneDNN is a bf16 candidate exactly where its weight reorder runs on this CPU (on an AVX2-only
        CPU it raises, which took the worker down at start)."""
        w = torch.randn(64, 128).to(torch.bfloat16)
        try:
            torch.ops.mkldnn._reorder_linear_weight(w)
            runs = True
        except RuntimeError:
            runs = False
        assert ("onednn" in candidates(w)) == runs
        assert ("onednn" in candidates(_weights()["layers.0.qkv.weight"])) == runs

    def test_without_onednn_bf16_no_weight_offers_it(self, monkeypatch):
        """Where oneDNN's bf16 path is missing, neither a bf16 matrix nor an int4 weight's bf16 copy offers
        onednn (nor dense, the copy's other kernel), and the packed kernel is still offered."""
        monkeypatch.setattr(kernels, "_onednn_bf16_available", lambda: False)
        w = _weights()["layers.0.qkv.weight"]
        assert candidates(w.dense) == ("linear", "packed")
        assert candidates(w) == ("int4", "packed", *W4A8)

    def test_every_dense_candidate_matches_f_linear(self):
        """Every kernel for a dense bf16 matrix equals F.linear within float rounding, bias included."""
        dtype = torch.bfloat16
        g = torch.Generator().manual_seed(1)
        w, b = (torch.randn(64, 128, generator=g) * 0.05).to(dtype), torch.randn(64, generator=g).to(dtype)
        assert candidates(w) == ("linear", *ONEDNN, "packed")
        for rows in ROWS:
            x = torch.randn(2, rows, 128, generator=g).to(dtype)
            ref = F.linear(x, w, b).float()
            for kernel in candidates(w):
                y = KERNELS[kernel](x, prepare(kernel, w), b)
                assert y.shape == (2, rows, 64) and y.dtype == dtype
                assert torch.allclose(y.float(), ref, atol=1e-2, rtol=1e-2), (kernel, rows)

    def test_every_int4_candidate_matches_its_reference(self):
        """The int4 kernel equals the Int4Weight's own product, and so does the packed int4 kernel (the W4A8 one within its int8 rounding); dense/onednn equal F.linear on the kept bf16 copy."""
        w = _weights()["layers.0.qkv.weight"]
        assert weight_format(w) == "int4" and candidates(w) == ("int4", *(("dense", "onednn") if ONEDNN else ()),
                                                                "packed", *W4A8)
        g = torch.Generator().manual_seed(2)
        for rows in ROWS:
            x = torch.randn(rows, 128, generator=g).to(torch.bfloat16)
            int4 = KERNELS["int4"](x, prepare("int4", w), None)
            assert torch.equal(int4, w.linear(x) if rows <= 16 else KERNELS["int4"](x, w, None))
            ref = F.linear(x, w.dense).float()
            for kernel in ("dense", "onednn") if ONEDNN else ():
                y = KERNELS[kernel](x, prepare(kernel, w), None).float()
                assert torch.allclose(y, ref, atol=1e-2, rtol=1e-2), (kernel, rows)
            packed = KERNELS["packed"](x, prepare("packed", w), None).float()  # int4 codes, like the int4 kernel
            assert torch.allclose(packed, int4.float(), atol=2e-2, rtol=2e-2), rows
            for kernel in W4A8:
                y = KERNELS[kernel](x, prepare(kernel, w), None).float()
                assert torch.allclose(y, int4.float(), atol=3e-2, rtol=3e-2), (kernel, rows)

    def test_fp32_keeps_f_linear(self):
        """fp32 weights (reference runs, tests) have F.linear as their only kernel."""
        assert candidates(torch.randn(8, 64)) == ("linear",)

    def test_fp32_quantized_weights_keep_torch_kernels(self):
        """int8/int4 weights with fp32 scales (fp32 activations) never get the bf16 packed kernel."""
        w = torch.randn(64, 128)
        q = quantize_main_weights({"a.weight": w, "b.weight": w.clone()}, "int8", torch.float32)["a.weight"]
        q4 = quantize_main_weights({"a.weight": w}, "int4", torch.float32)["a.weight"]
        assert candidates(q) == ("native",) and candidates(q4) == ("int4",)

    def test_int4_without_dense_copy_has_only_its_kernel(self):
        """An Int4Weight without a bf16 copy runs the int4 kernel or (with its codes) the packed one; its shape comes from its scales."""
        w = quantize_weights({"a.weight": torch.randn(48, 128).to(torch.bfloat16)})["a.weight"]
        assert candidates(w) == ("int4", "packed", *W4A8) and weight_shape(w) == (48, 128)
        assert candidates(replace(w, codes=None)) == ("int4",)

    def test_a_main_models_int4_weight_never_gets_the_w4a8_kernel(self):
        """A served (main) model's int4 weight is exact: the kernel that rounds activations to int8 is not a candidate, while a draft's weight of the same matrix may use it."""
        w = torch.randn(64, 128).to(torch.bfloat16)
        main = quantize_main_weights({"a.weight": w}, "int4", torch.bfloat16)["a.weight"]
        draft = quantize_weights({"a.weight": w})["a.weight"]
        assert main.exact and "w4a8" not in candidates(main)
        assert not draft.exact and ("w4a8" in candidates(draft)) == bool(W4A8)

    def test_int4_operand_drops_the_dense_copy(self):
        """The int4 kernel's operand holds no dense copy, so a ladder without dense steps frees it."""
        w = _weights()["layers.0.qkv.weight"]
        assert prepare("int4", w).dense is None and w.dense is not None
        assert prepare("int4", w).codes is None  # codes only live until the plan


class TestChoose:
    def test_fastest_kernel_per_bucket(self):
        """Per format and row bucket the fastest kernel wins; equal neighbours merge into one step."""
        t = {("bfloat16", 1, "linear"): 100.0, ("bfloat16", 1, "onednn"): 50.0,
             ("bfloat16", 8, "linear"): 200.0, ("bfloat16", 8, "onednn"): 60.0,
             ("bfloat16", 32, "linear"): 300.0, ("bfloat16", 32, "onednn"): 400.0,
             ("int4", 1, "int4"): 10.0, ("int4", 1, "dense"): 30.0,
             ("int4", 16, "int4"): 90.0, ("int4", 16, "dense"): 40.0}
        plans = choose(t, {"bfloat16": "linear", "int4": "int4"})
        assert plans == {"bfloat16": ((8, "onednn"), (32, "linear")), "int4": ((1, "int4"), (16, "dense"))}

    def test_near_tie_keeps_the_kernel_below(self):
        """A bucket whose winner is under MIN_GAIN faster than the kernel below keeps that kernel (one weight copy, not two)."""
        t = {("bfloat16", 1, "linear"): 100.0, ("bfloat16", 1, "packed"): 50.0,
             ("bfloat16", 128, "linear"): 900.0, ("bfloat16", 128, "packed"): 784.0, ("bfloat16", 128, "onednn"): 783.0}
        assert choose(t, {"bfloat16": "linear"}) == {"bfloat16": ((128, "packed"),)}
        t[("bfloat16", 128, "onednn")] = 700.0
        assert choose(t, {"bfloat16": "linear"}) == {"bfloat16": ((1, "packed"), (128, "onednn"))}

    def test_noise_keeps_the_default(self):
        """A challenger less than MIN_GAIN faster than the default does not replace it."""
        t = {("bfloat16", 1, "linear"): 100.0, ("bfloat16", 1, "onednn"): 97.0}
        assert choose(t, {"bfloat16": "linear"}) == {"bfloat16": ((1, "linear"),)}

    def test_pick_walks_the_ladder(self):
        """Rows up to a step's bound take its kernel; rows above the last bound take the last kernel."""
        ladder = ((4, "int4"), (32, "dense"))
        assert [pick(ladder, r) for r in (1, 4, 5, 32, 500)] == ["int4", "int4", "dense", "dense", "dense"]


class TestApplyPlan:
    def test_planned_weights_give_default_results(self):
        """After apply_plan the projections run the chosen kernels and give F.linear's result; others stay."""
        weights = _weights(keep_dense=None)
        before = {k: v.clone() for k, v in weights.items()}
        apply_plan(weights, {"bfloat16": ((4, FAST), (128, "linear"))})
        assert isinstance(weights["layers.0.qkv.weight"], PlannedWeight)
        assert torch.equal(weights["layers.0.in_norm"], before["layers.0.in_norm"])
        assert torch.equal(weights["embed"], before["embed"])
        for rows in ROWS:
            x = torch.randn(rows, 128).to(torch.bfloat16)
            y = weights["layers.0.qkv.weight"].linear(x)
            assert torch.allclose(y.float(), F.linear(x, before["layers.0.qkv.weight"]).float(), atol=1e-2)

    def test_default_only_or_impossible_ladders_leave_the_weight(self):
        """A ladder of the default kernel alone, or naming a kernel the weight cannot run, keeps the weight (int4: minus its codes)."""
        w = quantize_weights({"a.weight": torch.randn(48, 128).to(torch.bfloat16)})["a.weight"]
        for ladder in (((128, "int4"),), ((1, "int4"), (128, "dense")), None):
            kept = planned(w, ladder)
            assert kept.packed is w.packed and kept.scales_zeros is w.scales_zeros and kept.codes is None
        dense = torch.randn(8, 64).to(torch.bfloat16)
        assert planned(dense, ((128, "linear"),)) is dense and planned(dense, None) is dense

    def test_an_int4_only_ladder_drops_the_dense_copy_no_ladder_keeps_it(self):
        """An int4 weight with a dense copy loses it when its measured ladder is the int4 kernel alone,
        and keeps it without a plan (the fallback above INT4_MAX_ROWS rows)."""
        w = _weights()["layers.0.qkv.weight"]
        assert w.dense is not None
        assert planned(w, ((128, "int4"),)).dense is None and planned(w, None).dense is w.dense

    def test_planned_weight_keeps_only_used_forms(self):
        """A PlannedWeight holds one operand per kernel on its ladder (the replaced dense tensor is not kept)."""
        w = _weights()["layers.0.qkv.weight"]
        p = PlannedWeight(w, ((8, "int4"), (128, FAST)))
        assert set(p.forms) == {"int4", FAST} and p.forms["int4"].dense is None and p.shape == (96, 128)
