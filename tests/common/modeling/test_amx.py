"""When the W4A8 and bf16 kernels take their AMX paths: the crossover rule and its measurement."""

import pytest

from common.modeling.amx import (DEFAULT_LLC_BYTES, KINDS, MAX_PROBE_BYTES, PROBE_ROWS, STREAM_CACHES, available,
                                 choose_amx_rows, last_level_cache_bytes, measure_amx_rows, probe_copies)
from common.modeling.native import library


class TestChoose:
    def test_amx_from_the_first_row_count_it_wins_at_and_above(self):
        """AMX starts at the smallest probed row count from which it is at least 5% faster at every larger count."""
        times = {2: (10.0, 14.0), 4: (12.0, 13.0), 8: (20.0, 15.0), 16: (40.0, 22.0), 32: (80.0, 40.0)}
        assert choose_amx_rows(times) == 8

    def test_a_loss_above_a_win_moves_the_start_up(self):
        """A win below a probed count where AMX loses does not count: the start is above the last loss."""
        times = {2: (10.0, 5.0), 4: (12.0, 13.0), 8: (20.0, 15.0), 16: (40.0, 22.0)}
        assert choose_amx_rows(times) == 8

    def test_never_when_amx_does_not_win_at_the_top(self):
        """0 (never) when AMX is not 5% faster at the largest probed count; a near-tie is not a win."""
        assert choose_amx_rows({8: (20.0, 15.0), 16: (40.0, 39.0)}) == 0
        assert choose_amx_rows({}) == 0


class TestProbeSize:
    def test_the_largest_cache_sysfs_lists_in_bytes(self, tmp_path):
        """The last-level cache is the largest index*/size, with K/M/G suffixes read as binary units."""
        for i, size in enumerate(["48K", "2048K", "307200K", "junk"]):
            (tmp_path / f"index{i}").mkdir()
            (tmp_path / f"index{i}" / "size").write_text(size + "\n")
        assert last_level_cache_bytes(tmp_path) == 307200 * 1024
        (tmp_path / "index4").mkdir()
        (tmp_path / "index4" / "size").write_text("1G")
        assert last_level_cache_bytes(tmp_path) == 1 << 30

    def test_no_sysfs_cache_gives_the_default(self, tmp_path):
        """Where sysfs lists no cache (a container without /sys) the default size is assumed."""
        assert last_level_cache_bytes(tmp_path / "missing") == DEFAULT_LLC_BYTES

    def test_copies_span_the_caches_within_the_cap(self):
        """The probe's weights are copied until they span STREAM_CACHES caches, at least once, never past the cap."""
        pair = 34_000_000
        n = probe_copies(pair, 300 << 20)
        assert n * pair >= STREAM_CACHES * (300 << 20) > (n - 1) * pair
        assert probe_copies(pair, 1 << 20) == 1
        assert probe_copies(pair, 64 << 30) * pair <= MAX_PROBE_BYTES


class TestMeasure:
    @pytest.mark.parametrize("kind", sorted(KINDS))
    def test_switched_off_by_environment(self, monkeypatch, kind):
        """Each kernel's switch (TREESPEC_W4A8_AMX / TREESPEC_BF16_AMX = 0) gives 0 (never AMX) without measuring."""
        monkeypatch.setenv(KINDS[kind], "0")
        lib = library()
        assert lib is None or (not available(lib, kind) and measure_amx_rows(lib, kind) == 0)

    def test_an_unknown_kernel_is_refused(self):
        """A kind without an AMX path raises KeyError instead of silently measuring nothing."""
        lib = library()
        if lib is None:
            pytest.skip("no C++ compiler: the kernel library is not built")
        with pytest.raises(KeyError):
            measure_amx_rows(lib, "int8")

    @pytest.mark.parametrize("kind", sorted(KINDS))
    def test_measures_a_probed_row_count_and_restores_the_library(self, monkeypatch, kind):
        """On a host with the path the measurement returns 0 or a probed row count, and leaves the library's setting as it was."""
        monkeypatch.delenv(KINDS[kind], raising=False)
        lib = library()
        if lib is None or not available(lib, kind):
            pytest.skip(f"the {kind} AMX path needs AMX (and the OS's grant)")
        monkeypatch.setattr(lib, f"{kind}_amx_rows", 5)
        assert measure_amx_rows(lib, kind) in (0, *PROBE_ROWS)
        assert getattr(lib, f"{kind}_amx_rows") == 5
