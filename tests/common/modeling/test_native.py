"""treespec's own packed bf16 projection kernel: build, layout, numerics, fallbacks."""

import platform
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from common.modeling import native
from common.modeling.kernels import KERNELS, candidates, prepare
from common.modeling.native import HUGE_PAGE, build, huge_empty, library, load
from common.modeling.quant import Int8Weight, int4_codes, quantize_int8

SHAPES = ((64, 128), (100, 30), (70, 65), (256, 1024 + 96))  # (N, K): ragged panels, odd K, a K past one chunk
ROWS = (1, 2, 5, 6, 7, 13, 16, 40)


def _variants(tmp_path: Path) -> dict[str, native.PackedGemmLibrary]:
    """Every ISA variant this host can run: -march=native, plus AVX2 and portable builds on x86-64."""
    marches = ["native"] + (["x86-64-v3", "x86-64"] if platform.machine() == "x86_64" else [])
    flags = native._cpu_flags()
    libs = {}
    for march in marches:
        if march == "x86-64-v3" and " avx2" not in flags:
            continue
        path = build(tmp_path, march)
        assert path is not None, f"build failed for -march={march}"
        lib = load(path)
        libs[(lib.variant, lib.w4a8_variant)] = lib  # both: a VNNI CPU without AVX512-BF16 builds "avx2" twice
    if native.cpu_has("avx512_vnni"):
        assert any(lib.w4a8_vnni for lib in libs.values()), "the native build must carry the VNNI W4A8 kernel"
    if " avx2" in flags:  # x86-64-v3 (AVX2 + FMA): the W4A8 kernel an AVX2-only CPU serves
        assert any(lib.w4a8_variant == "avx2" for lib in libs.values()), "the AVX2 build must carry the AVX2 W4A8 kernel"
    return libs


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict[str, native.PackedGemmLibrary]:
    return _variants(tmp_path_factory.mktemp("native"))


class TestNumerics:
    def test_every_variant_matches_an_fp32_reference(self, variants):
        """Every ISA variant's x @ W.T + b is within bf16 rounding of the fp32 product, for ragged shapes and row counts."""
        assert any(v == "portable" for v, _ in variants) or platform.machine() != "x86_64"
        g = torch.Generator().manual_seed(0)
        for name, lib in variants.items():
            for n, k in SHAPES:
                w = (torch.randn(n, k, generator=g) * 0.05).bfloat16()
                b = torch.randn(n, generator=g).bfloat16()
                packed = lib.pack(w)
                for rows in ROWS:
                    x = torch.randn(rows, k, generator=g).bfloat16()
                    ref = x.float() @ w.float().T + b.float()
                    y = packed.linear(x, b)
                    assert y.shape == (rows, n) and y.dtype == torch.bfloat16
                    err, base = (y.float() - ref).abs().max(), (F.linear(x, w, b).float() - ref).abs().max()
                    assert err <= 2 * base + 1e-2, (name, n, k, rows, float(err), float(base))

    def test_a_row_does_not_depend_on_its_batch(self, variants):
        """On the AVX-512/AVX2/portable paths each row's bf16 or int8 product is bit-identical whether it runs alone or with 1..39 other rows (whole register blocks and every remainder)."""
        g = torch.Generator().manual_seed(1)
        for lib in variants.values():
            w = (torch.randn(192, 1536, generator=g) * 0.05).bfloat16()
            w8 = Int8Weight(*quantize_int8(w, torch.bfloat16))
            x = torch.randn(40, 1536, generator=g).bfloat16()
            for kind, packed in (("bf16", lib.pack(w)), ("int8", lib.pack_int8(w8.q, w8.scales))):
                alone = torch.cat([packed.linear(x[i:i + 1]) for i in range(40)])
                for rows in (2, 3, 4, 5, 6, 7, 9, 16, 40):
                    assert torch.equal(packed.linear(x[:rows]), alone[:rows]), (lib.variant, kind, rows)

    @pytest.mark.skipif(not (library() and library().bf16_amx), reason="the bf16 AMX path needs AMX-BF16 (and the OS's grant)")
    def test_bf16_amx_path_matches_the_reference_and_its_own_rows(self, monkeypatch):
        """Calls from the AMX row count on are within bf16 rounding of the fp32 product, each row bit-identical
        whatever the call's row count (tiles past the first, a ragged last tile), and a K that is not a multiple
        of 32 falls back to the VDPBF16PS path bit for bit."""
        lib = library()
        monkeypatch.setattr(lib, "bf16_amx_rows", 2)
        g = torch.Generator().manual_seed(2)
        for n, k in ((192, 1536), (70, 96), (64, 100)):
            w = (torch.randn(n, k, generator=g) * 0.05).bfloat16()
            b = torch.randn(n, generator=g).bfloat16()
            packed = lib.pack(w)
            x = torch.randn(40, k, generator=g).bfloat16()
            full = packed.linear(x, b)
            ref = x.float() @ w.float().T + b.float()
            base = (F.linear(x, w, b).float() - ref).abs().max()
            assert (full.float() - ref).abs().max() <= 2 * base + 1e-2, (n, k)
            for rows in (2, 7, 16, 17, 33):
                assert torch.equal(packed.linear(x[:rows], b), full[:rows]), (n, k, rows)
            if k % 32:
                monkeypatch.setattr(lib, "bf16_amx_rows", 0)
                assert torch.equal(packed.linear(x, b), full), (n, k)
                monkeypatch.setattr(lib, "bf16_amx_rows", 2)

    def test_int8_matches_its_dequantized_product(self, variants):
        """int8 panels give (x @ q.T) * scales within bf16 rounding of the fp32 product, in every variant."""
        g = torch.Generator().manual_seed(2)
        for name, lib in variants.items():
            for n, k in SHAPES:
                w = Int8Weight(*quantize_int8((torch.randn(n, k, generator=g) * 0.05).bfloat16(), torch.bfloat16))
                b = torch.randn(n, generator=g).bfloat16()
                packed = lib.pack_int8(w.q, w.scales)
                for rows in ROWS:
                    x = torch.randn(rows, k, generator=g).bfloat16()
                    ref = (x.float() @ w.q.float().T) * w.scales.float() + b.float()
                    dense = (F.linear(x, w.q.bfloat16()) * w.scales + b).float()  # torch's int8 kernel refuses ragged shapes
                    err, base = (packed.linear(x, b).float() - ref).abs().max(), (dense - ref).abs().max()
                    assert err <= 2 * base + 2e-2, (name, n, k, rows, float(err), float(base))
            alone = torch.cat([packed.linear(x[i:i + 1]) for i in range(x.shape[0])])
            assert torch.equal(packed.linear(x), alone), name  # batch-invariant like the bf16 path

    def test_int4_matches_its_dequantized_product(self, variants):
        """int4 panels give x @ ((q - 8) * scale + zero).T within bf16 rounding of the fp32 product, in every variant."""
        g = torch.Generator().manual_seed(3)
        for name, lib in variants.items():
            for n, k in ((64, 128), (100, 192), (256, 1024 + 64)):  # ragged panels, a K past one chunk
                w = (torch.randn(n, k, generator=g) * 0.05).bfloat16()
                q, sz = int4_codes(w)
                deq = ((q.float() - 8).view(n, k // 64, 64) * sz[..., 0].T.float()[..., None]
                       + sz[..., 1].T.float()[..., None]).view(n, k)
                b = torch.randn(n, generator=g).bfloat16()
                packed = lib.pack_int4(q, sz)
                for rows in ROWS:
                    x = torch.randn(rows, k, generator=g).bfloat16()
                    ref = x.float() @ deq.T + b.float()
                    base = (F.linear(x, deq.bfloat16(), b).float() - ref).abs().max()
                    err = (packed.linear(x, b).float() - ref).abs().max()
                    assert err <= 2 * base + 2e-2, (name, n, k, rows, float(err), float(base))
            alone = torch.cat([packed.linear(x[i:i + 1]) for i in range(x.shape[0])])
            assert torch.equal(packed.linear(x), alone), name

    def test_w4a8_matches_its_int8_activation_reference(self, variants):
        """The W4A8 kernel computes sum_g xs * (scale * q.p + lo * sum p) with x rounded to int8 per row and group of 64 (an fp64 reference), within bf16 output rounding, rows independent of their batch, in every variant."""
        g = torch.Generator().manual_seed(4)
        for name, lib in variants.items():
            for n, k in ((64, 128), (100, 192), (256, 1024 + 64)):  # ragged panels, a K past one chunk
                q, sz = int4_codes((torch.randn(n, k, generator=g) * 0.05).bfloat16())
                scale, lo = sz[..., 0].double().T, (sz[..., 1].double() - 8 * sz[..., 0].double()).T  # [N, K/64]
                b = torch.randn(n, generator=g).bfloat16()
                packed = lib.pack_w4a8(q, sz)
                x = torch.randn(max(ROWS), k, generator=g).bfloat16()
                xg = x.double().view(-1, k // 64, 64)
                xs = xg.abs().amax(-1, keepdim=True) / 127  # [M, K/64, 1]
                p = (xg / xs).round().clamp(-127, 127)
                dots = torch.einsum("mgk,ngk->mng", p, q.double().view(n, k // 64, 64))  # [M, N, K/64]
                ref = ((dots * scale + lo * p.sum(-1)[:, None, :]) * xs[:, None, :, 0]).sum(-1) + b.double()
                for rows in ROWS:
                    y = packed.linear(x[:rows], b).double()
                    assert torch.allclose(y, ref[:rows], atol=1e-2, rtol=1e-2), (name, lib.w4a8_variant, n, k, rows)
                alone = torch.cat([packed.linear(x[i:i + 1], b) for i in range(x.shape[0])])
                assert torch.equal(packed.linear(x, b), alone), (name, lib.w4a8_variant)

    def test_w4a8_extreme_codes_and_activations_do_not_overflow(self, variants):
        """With every code 15 and every activation at +-127 (the largest partial sums: the AVX2 variant adds 4 octets' pair sums in int16, 30480 of 32767) each variant's exact group sums equal the fp64 ones."""
        n, k = 64, 256
        q = torch.full((n, k), 15, dtype=torch.uint8)
        sz = torch.stack([torch.full((k // 64, n), 2.0 ** -10), torch.zeros(k // 64, n)], -1).bfloat16()
        sign = torch.ones(4, k)
        sign[1] = -1
        sign[2, ::2] = -1  # alternating signs: small sums
        sign[3, : k // 2] = -1
        x = sign.bfloat16()  # rounds to p = +-127 exactly (xs = 1 / 127)
        ref = (7 * 2.0 ** -10 * sign.double()).sum(-1)  # [4]: w = 15 * scale + (zero - 8 * scale) = 7 * scale
        for name, lib in variants.items():
            y = lib.pack_w4a8(q, sz).linear(x).double()  # [4, n]
            assert torch.allclose(y, ref[:, None].expand(4, n), atol=1e-2, rtol=1e-2), (name, y[:, 0], ref)

    @pytest.mark.skipif(not (library() and library().w4a8_amx), reason="the W4A8 AMX path needs AMX-INT8 (and the OS's grant)")
    def test_w4a8_amx_path_is_bit_identical_to_the_vnni_path(self):
        """The W4A8 kernel's AMX-INT8 path gives the VNNI path's results bit for bit (the same int32 group sums and float epilogue), for ragged panels, a K past one chunk, row counts around the 16-row tile and with or without bias."""
        lib, g = library(), torch.Generator().manual_seed(6)
        saved = lib.w4a8_amx_rows
        try:
            for n, k in ((64, 128), (100, 192), (300, 1024 + 64)):
                q, sz = int4_codes((torch.randn(n, k, generator=g) * 0.05).bfloat16())
                packed, b = lib.pack_w4a8(q, sz), torch.randn(n, generator=g).bfloat16()
                for rows in (1, 2, 5, 15, 16, 17, 33, 40):
                    x = torch.randn(rows, k, generator=g).bfloat16()
                    for bias in (None, b):
                        lib.w4a8_amx_rows = 0
                        vnni = packed.linear(x, bias)
                        lib.w4a8_amx_rows = 1
                        assert torch.equal(packed.linear(x, bias), vnni), (n, k, rows, bias is None)
        finally:
            lib.w4a8_amx_rows = saved

    def test_leading_dims_and_dtype_round_trip(self):
        """[B, T, K] inputs keep their leading dims; fp32 inputs come back fp32; zero rows give an empty result."""
        lib = library()
        assert lib is not None, "the native kernel must build on this host (g++ installed)"
        w = torch.randn(64, 32).bfloat16()
        packed = lib.pack(w)
        x = torch.randn(2, 3, 32)
        y = packed.linear(x)
        assert y.shape == (2, 3, 64) and y.dtype == torch.float32
        assert torch.allclose(y, F.linear(x.bfloat16(), w).float(), atol=2e-2, rtol=2e-2)
        assert packed.linear(torch.empty(0, 32).bfloat16()).shape == (0, 64)


class TestErrors:
    def test_pack_refuses_non_bf16(self):
        """Packing an fp32 matrix raises ValueError naming the dtype instead of misreading memory."""
        with pytest.raises(ValueError, match="float32"):
            library().pack(torch.randn(64, 32))

    def test_int8_scales_must_match_rows(self):
        """int8 packing with a scale count other than N raises ValueError."""
        with pytest.raises(ValueError, match="64 scales"):
            library().pack_int8(torch.zeros(64, 32, dtype=torch.int8), torch.ones(63))

    def test_int4_needs_whole_groups(self):
        """int4 packing of a K that is not a multiple of 64 raises ValueError instead of reading past a row."""
        with pytest.raises(ValueError, match="K % 64"):
            library().pack_int4(torch.zeros(64, 96, dtype=torch.uint8), torch.ones(1, 64, 2))

    def test_w4a8_needs_whole_groups(self):
        """W4A8 packing of a K that is not a multiple of 64 raises ValueError instead of reading past a row."""
        with pytest.raises(ValueError, match="K % 64"):
            library().pack_w4a8(torch.zeros(64, 96, dtype=torch.uint8), torch.ones(1, 64, 2))

    def test_wrong_feature_count_is_refused(self):
        """An input whose last dimension is not K raises ValueError before the kernel reads past the rows."""
        packed = library().pack(torch.randn(64, 32).bfloat16())
        with pytest.raises(ValueError, match="expects 32"):
            packed.linear(torch.randn(1, 31).bfloat16())


class TestBuild:
    def test_no_compiler_means_no_kernel(self, tmp_path, monkeypatch):
        """Without a C++ compiler build() returns None (the worker keeps torch's kernels) instead of raising."""
        monkeypatch.setattr(native, "COMPILER", "/nonexistent/g++")
        assert build(tmp_path) is None

    def test_second_build_reuses_the_file(self, tmp_path):
        """A second build of the same source for the same host returns the cached library without compiling."""
        first = build(tmp_path)
        stamp = first.stat().st_mtime_ns
        assert build(tmp_path) == first and first.stat().st_mtime_ns == stamp
        assert not list(tmp_path.glob("*.tmp"))  # written atomically, no leftovers

    def test_disabled_by_environment(self, monkeypatch):
        """TREESPEC_NATIVE_KERNEL=0 turns the kernel off (library() None) for A/B runs."""
        monkeypatch.setenv("TREESPEC_NATIVE_KERNEL", "0")
        library.cache_clear()
        try:
            assert library() is None
        finally:
            monkeypatch.delenv("TREESPEC_NATIVE_KERNEL")
            library.cache_clear()
        assert library() is not None


class TestIntegration:
    def test_huge_empty_is_aligned(self):
        """Panels start on a 2 MiB boundary so the kernel's stream can sit in transparent huge pages."""
        t = huge_empty(3 * HUGE_PAGE // 2, torch.bfloat16)
        assert t.numel() == 3 * HUGE_PAGE // 2 and t.data_ptr() % HUGE_PAGE == 0

    def test_packed_is_a_candidate_for_bf16(self):
        """A dense bf16 CPU matrix lists the packed kernel, and running it through KERNELS matches F.linear."""
        w = (torch.randn(96, 128) * 0.05).bfloat16()
        assert "packed" in candidates(w)
        x = torch.randn(5, 128).bfloat16()
        y = KERNELS["packed"](x, prepare("packed", w), None)
        assert torch.allclose(y.float(), F.linear(x, w).float(), atol=1e-2, rtol=1e-2)

    def test_packed_is_a_candidate_for_int8(self):
        """An int8 main-model weight lists torch's int8 kernel first and the packed one second; both agree."""
        w = Int8Weight(*quantize_int8((torch.randn(96, 128) * 0.05).bfloat16(), torch.bfloat16))
        assert candidates(w) == ("native", "packed")
        x = torch.randn(3, 128).bfloat16()
        y = KERNELS["packed"](x, prepare("packed", w), None)
        assert torch.allclose(y.float(), w.linear(x).float(), atol=2e-2, rtol=2e-2)
