"""Weight-only int4 quantization against a dequantized reference."""

import torch

from common.modeling.quant import GROUP, Int4Weight, int4_linear, int4_supported, quantize_int4, quantize_weights


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
