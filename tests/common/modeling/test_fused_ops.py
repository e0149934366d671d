"""Fused decoder element-wise ops (residual add + RMSNorm, RoPE, SwiGLU): native C++ vs torch reference."""

import platform

import pytest
import torch

from common.modeling import fused_ops, native
from common.modeling.fused_ops import NativeOps, TorchOps
from common.modeling.native import build, load

ROWS = (1, 3, 17, 40)  # one row, a tree level, and past the 16-row threading threshold


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict[str, NativeOps]:
    """NativeOps over every ISA build this host runs (native, AVX2, portable)."""
    marches = ["native"] + (["x86-64-v3", "x86-64"] if platform.machine() == "x86_64" else [])
    out, tmp = {}, tmp_path_factory.mktemp("ops")
    for march in marches:
        if march == "x86-64-v3" and " avx2" not in native._cpu_flags():
            continue
        path = build(tmp, march)
        assert path is not None, f"build failed for -march={march}"
        lib = load(path)
        out[lib.variant] = NativeOps(lib)
    return out


def _bf16(*shape, seed: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).bfloat16()


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Within two bf16 roundings of each other (relative 2^-7, plus a small absolute floor)."""
    return bool(((a.float() - b.float()).abs() <= 2 * 2 ** -8 * b.float().abs() + 1e-2).all())


class TestAgainstTorch:
    def test_add_rms_norm_matches_torch_and_updates_the_residual(self, variants):
        """x + delta is written into x (as torch's sum) and the normalised output matches torch within bf16 rounding."""
        for ops in variants.values():
            for rows in ROWS:
                x, d, w = _bf16(rows, 896, seed=rows), _bf16(rows, 896, seed=rows + 1), _bf16(896, seed=2)
                ref_x, ref_h = TorchOps().add_rms_norm(x.clone(), d, w, 1e-6)
                out_x, out_h = ops.add_rms_norm(x.clone(), d, w, 1e-6)
                assert torch.equal(out_x, ref_x) and _close(out_h, ref_h)
                _, h0 = ops.add_rms_norm(x.clone(), None, w, 1e-6)  # no delta: x untouched
                assert _close(h0, TorchOps().add_rms_norm(x, None, w, 1e-6)[1])

    def test_rope_matches_torch_on_q_and_k_and_leaves_v(self, variants):
        """RoPE on the q and k heads of a fused qkv row matches torch's rotate-half; v is returned unchanged."""
        pos = torch.arange(5, 5 + 2 * 3).view(2, 3)
        inv = 1.0 / (10000 ** (torch.arange(0, 64, 2).float() / 64))
        emb = torch.cat([torch.outer(pos.flatten().float(), inv)] * 2, dim=-1).view(2, 3, 64)
        cos, sin = emb.cos().bfloat16(), emb.sin().bfloat16()
        for ops in variants.values():
            qkv = _bf16(2, 3, 14 + 2 + 2, 64, seed=3)
            rq, rk, rv = TorchOps().rope_qkv(qkv.clone(), 14, 2, cos, sin)
            q, k, v = ops.rope_qkv(qkv.clone(), 14, 2, cos, sin)
            assert _close(q, rq) and _close(k, rk) and torch.equal(v, rv)

    def test_silu_mul_matches_torch_including_extremes(self, variants):
        """silu(gate) * up matches torch within bf16 rounding, also for gates of +-100 (exp clamped, no inf/nan)."""
        for ops in variants.values():
            for rows in ROWS:
                gu = _bf16(rows, 2 * 4864, seed=rows, scale=4.0)
                gu[0, :4] = torch.tensor([100.0, -100.0, 0.0, -87.5]).bfloat16()
                out = ops.silu_mul(gu)
                assert out.shape == (rows, 4864) and torch.isfinite(out.float()).all()
                assert _close(out, TorchOps().silu_mul(gu))


class TestRowIndependence:
    def test_a_row_does_not_depend_on_its_batch(self, variants):
        """Each op's result for a row is bit-identical alone and among 40 rows (threaded), so tree and plain steps agree."""
        ops = next(iter(variants.values()))  # the -march=native build
        x, d, w, gu = _bf16(40, 1536, seed=5), _bf16(40, 1536, seed=6), _bf16(1536, seed=7), _bf16(40, 2 * 8960, seed=8)
        _, all_h = ops.add_rms_norm(x.clone(), d, w, 1e-6)
        all_s = ops.silu_mul(gu)
        for r in (0, 17, 39):
            _, one_h = ops.add_rms_norm(x[r:r + 1].clone(), d[r:r + 1], w, 1e-6)
            assert torch.equal(one_h[0], all_h[r]) and torch.equal(ops.silu_mul(gu[r:r + 1])[0], all_s[r])


class TestFallbacks:
    def test_fp32_and_non_contiguous_inputs_use_torch_exactly(self, variants):
        """Tensors the C++ ops do not take (fp32, a non-contiguous view) give torch's results bit for bit."""
        ops = next(iter(variants.values()))
        x, w = torch.randn(3, 64), torch.randn(64)
        assert torch.equal(ops.add_rms_norm(x.clone(), x, w, 1e-6)[1], TorchOps().add_rms_norm(x.clone(), x, w, 1e-6)[1])
        gu = _bf16(8, 3, seed=9).T  # [3, 8] view, not contiguous
        assert torch.equal(ops.silu_mul(gu), TorchOps().silu_mul(gu))

    def test_for_model_picks_native_only_for_bf16_on_cpu(self, monkeypatch):
        """fp32 models keep torch's ops; bf16 models get the C++ ops unless TREESPEC_NATIVE_KERNEL=0."""
        assert isinstance(fused_ops.for_model(torch.float32, "cpu"), TorchOps)
        assert not isinstance(fused_ops.for_model(torch.float32, "cpu"), NativeOps)
        native.library.cache_clear()
        try:
            assert isinstance(fused_ops.for_model(torch.bfloat16, "cpu"), NativeOps)
            native.library.cache_clear()
            monkeypatch.setenv("TREESPEC_NATIVE_KERNEL", "0")
            assert not isinstance(fused_ops.for_model(torch.bfloat16, "cpu"), NativeOps)
        finally:
            native.library.cache_clear()
