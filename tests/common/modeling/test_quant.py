"""Weight-only int4 / int8 quantization against a dequantized reference."""

from dataclasses import replace

import pytest
import torch

from common.modeling.quant import (GROUP, INT8_MAX_ROWS, Int4Weight, Int8Weight, dequantize_int4, int4_codes,
                                   int4_linear, int4_supported,
                                   quantize_int4, quantize_int8, quantize_main_weights, quantize_weights,
                                   weight_bytes)


def _dequantize(w: torch.Tensor) -> torch.Tensor:
    """Reference: the same asymmetric per-group rounding, dequantized in fp32 (w ~= q * scale + min)."""
    n, k = w.shape
    g = w.reshape(n, k // GROUP, GROUP)
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp(min=1e-6)
    q = ((g - lo) / scale).round().clamp(0, 15)
    return (q * scale + lo).reshape(n, k)


class TestInt4:
    def test_matches_dequantized_reference(self):
        """int4_linear equals x @ dequant(w).T up to bf16 rounding, and is close to the fp32 product."""
        g = torch.Generator().manual_seed(0)
        w = torch.randn(48, 256, generator=g) * 0.05
        x = torch.randn(5, 256, generator=g)
        y = int4_linear(x.to(torch.bfloat16), *quantize_int4(w)).float()
        assert y.shape == (5, 48)
        ref = x @ _dequantize(w).T
        exact = x @ w.T
        assert (y - ref).abs().max() < 0.02 * ref.abs().max()
        # quantization error: much smaller than the signal, larger than bf16 noise alone
        rel = (y - exact).norm() / exact.norm()
        assert rel < 0.15

    def test_batched_leading_dims(self):
        """Leading dimensions of x are preserved."""
        w = torch.randn(16, GROUP)
        x = torch.randn(2, 3, GROUP).to(torch.bfloat16)
        assert int4_linear(x, *quantize_int4(w)).shape == (2, 3, 16)

    def test_quantize_weights_selects_supported(self):
        """Only kernel-compatible 2-D '*.weight' matrices are packed; the rest pass through."""
        ok, odd, bias = torch.randn(16, GROUP), torch.randn(16, GROUP + 1), torch.randn(16)
        assert int4_supported(ok) and not int4_supported(odd)
        out = quantize_weights({"a.weight": ok, "b.weight": odd, "a.bias": bias, "lm_head": torch.randn(8, GROUP)})
        assert isinstance(out["a.weight"], Int4Weight) and out["a.weight"].dense is None
        assert out["b.weight"] is odd and out["a.bias"] is bias and isinstance(out["lm_head"], torch.Tensor)


class TestInt8:
    def test_matches_dequantized_reference(self):
        """Int8Weight.linear equals x @ (q * scale).T in fp32 on both paths (kernel for few
        rows, cast + GEMM for many), and the quantization error is small."""
        g = torch.Generator().manual_seed(1)
        w = torch.randn(40, 96, generator=g) * 0.05
        q, scales = quantize_int8(w, torch.float32)
        assert q.dtype == torch.int8 and q.abs().max() == 127 and scales.shape == (40,)
        deq = q.float() * scales[:, None]
        iw = Int8Weight(q, scales)
        for rows in (1, INT8_MAX_ROWS, INT8_MAX_ROWS + 1, 64):
            x = torch.randn(rows, 96, generator=g)
            y, ref = iw.linear(x), x @ deq.T
            assert torch.allclose(y, ref, atol=1e-5, rtol=1e-5)
            assert ((y - x @ w.T).norm() / ref.norm()) < 0.02  # int8: ~0.5% per weight

    def test_bias_dtype_and_leading_dims(self):
        """Leading dimensions are kept, the bias is added and bf16 stays bf16."""
        w, b = torch.randn(16, 32), torch.randn(16)
        iw = Int8Weight(*quantize_int8(w, torch.bfloat16))
        x = torch.randn(2, 3, 32)
        y = iw.linear(x.to(torch.bfloat16), b.to(torch.bfloat16))
        assert y.shape == (2, 3, 16) and y.dtype == torch.bfloat16
        assert torch.allclose(y.float(), x @ w.T + b, atol=0.1, rtol=0.05)


class TestQuantizeMainWeights:
    @pytest.mark.parametrize("scheme,cls", [("int8", Int8Weight), ("int4", Int4Weight)])
    def test_projections_quantized_rest_kept(self, scheme, cls):
        """Every 2-D '*.weight' becomes a quantized weight (int4 with its own dequantized
        weights as the dense copy); embeddings, LM head, norms and biases stay; the quantized
        forms (without that copy) take fewer bytes."""
        w = {"embed": torch.randn(8, GROUP), "lm_head": torch.randn(8, GROUP), "norm": torch.ones(GROUP),
             "layers.0.qkv.weight": torch.randn(32, GROUP), "layers.0.qkv.bias": torch.randn(32),
             "layers.0.down.weight": torch.randn(GROUP, 2 * GROUP)}
        out = quantize_main_weights(w, scheme, torch.float32)
        assert isinstance(out["layers.0.qkv.weight"], cls) and isinstance(out["layers.0.down.weight"], cls)
        assert all(out[k] is w[k] for k in ("embed", "lm_head", "norm", "layers.0.qkv.bias"))
        if scheme == "int4":
            q = out["layers.0.qkv.weight"]
            assert torch.equal(q.dense, dequantize_int4(q.codes, q.scales_zeros))
            out = {k: replace(v, dense=None) if isinstance(v, Int4Weight) else v for k, v in out.items()}
        assert weight_bytes(out) < weight_bytes(w)

    def test_int4_dense_off_keeps_int4_bytes_only(self):
        """main_int4_dense false: int4 projections carry no dense copy, so they hold fewer bytes than the bf16 matrix."""
        w = {"layers.0.qkv.weight": torch.randn(32, GROUP).bfloat16()}
        out = quantize_main_weights(w, "int4", torch.bfloat16, int4_dense=False)
        assert out["layers.0.qkv.weight"].dense is None and weight_bytes(out) < weight_bytes(w)

    def test_dequantized_int4_is_what_the_kernel_multiplies(self):
        """x @ dequantize_int4(codes).T equals torch's int4 kernel on the same codes (fp32, to float rounding)."""
        torch.manual_seed(0)
        w, x = torch.randn(48, 2 * GROUP), torch.randn(5, 2 * GROUP)
        q, sz = int4_codes(w, torch.float32)
        dense = dequantize_int4(q, sz)
        kernel = int4_linear(x, torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 2), sz)
        torch.testing.assert_close(x @ dense.T, kernel, rtol=1e-5, atol=1e-4)
        assert (dense - w).abs().max() < 0.6 * (w.max() - w.min()) / 15  # within a code step of the original

    def test_none_and_unknown(self):
        """'none' returns the weights unchanged; an unknown scheme raises ValueError naming it."""
        w = {"layers.0.o.weight": torch.randn(8, 8)}
        assert quantize_main_weights(w, "none", torch.float32) is w
        with pytest.raises(ValueError, match="int3"):
            quantize_main_weights(w, "int3", torch.float32)

    def test_int4_fp32_activations(self):
        """With fp32 scales the int4 kernel takes fp32 activations (the main model's test dtype)."""
        g = torch.Generator().manual_seed(2)
        w, x = torch.randn(32, 2 * GROUP, generator=g) * 0.05, torch.randn(3, 2 * GROUP, generator=g)
        y = Int4Weight(*quantize_int4(w, torch.float32)).linear(x)
        assert y.dtype == torch.float32
        assert torch.allclose(y, x @ _dequantize(w).T, atol=1e-4, rtol=1e-4)
