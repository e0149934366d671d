"""The row count from which the W4A8 kernel takes its AMX-INT8 path, measured at start.

``csrc/w4a8_gemm.cpp`` has two paths over the same packed int4 weights: VPDPBUSD (AVX512-VNNI),
best for a plain decode step (1 row: the weight stream is the cost), and AMX-INT8 tiles (TDPBSUD,
16 rows x 64 channels x 16 outputs per instruction), best for a token tree or a prefill, where the
VNNI path is compute-bound (about 4.5x its 1-row time at 16 rows on the 2-core Intel Xeon host with AMX,
AMX about 2.5x). Both give bit-identical results (exact int32 group sums, the same float epilogue),
so a w4a8 main model may verify a tree on one path and decode plainly on the other and speculation
stays lossless. Where the crossover lies depends on the host: :func:`measure_amx_rows` times both
paths on two projection shapes of a 1.5B model (random codes; the cost does not depend on values).
"""

from __future__ import annotations

import os
import time

import torch

PROBE_ROWS = (2, 4, 8, 12, 16, 24, 32)  # rows (tokens per pass) timed on both paths
PROBE_SHAPES = ((2048, 1536), (1536, 8960))  # [N, K]: Qwen2.5-1.5B's qkv and down projections
PROBE_REPS = 3  # each path keeps its fastest of these runs
MIN_GAIN = 0.05  # AMX takes a row count only when at least 5% faster there (noise guard)


def choose_amx_rows(times: dict[int, tuple[float, float]]) -> int:
    """The smallest probed row count from which AMX is ``MIN_GAIN`` faster at every larger probed
    count, else 0 (never). ``times``: rows -> (VNNI ms, AMX ms)."""
    start = 0
    for rows in sorted(times, reverse=True):
        vnni_ms, amx_ms = times[rows]
        if amx_ms > (1 - MIN_GAIN) * vnni_ms:
            break
        start = rows
    return start


def measure_amx_rows(lib) -> int:
    """Time both W4A8 paths of ``lib`` (a ``native.PackedGemmLibrary``) and return the row count
    from which its AMX path runs (0: never; also without AMX, or with ``TREESPEC_W4A8_AMX=0``, an
    A/B switch). Takes about 0.3 s on a 2-core host; leaves ``lib.w4a8_amx_rows`` as it found it."""
    if not (lib.w4a8_vnni and lib.w4a8_amx) or os.environ.get("TREESPEC_W4A8_AMX", "1") == "0":
        return 0
    gen = torch.Generator().manual_seed(0)
    weights = [lib.pack_w4a8(torch.randint(0, 16, (n, k), dtype=torch.uint8, generator=gen),
                             torch.full((k // 64, n, 2), 0.01, dtype=torch.bfloat16)) for n, k in PROBE_SHAPES]
    saved, times = lib.w4a8_amx_rows, {}
    try:
        for rows in PROBE_ROWS:
            xs = [torch.randn(rows, w.k, generator=gen).bfloat16() for w in weights]
            times[rows] = tuple(_best_ms(lib, weights, xs, amx) for amx in (False, True))
    finally:
        lib.w4a8_amx_rows = saved
    return choose_amx_rows(times)


def _best_ms(lib, weights, xs, amx: bool) -> float:
    lib.w4a8_amx_rows = 1 if amx else 0
    best = float("inf")
    for _ in range(PROBE_REPS + 1):  # the first run warms caches and is dropped
        start = time.perf_counter()
        for w, x in zip(weights, xs):
            w.linear(x)
        best = min(best, (time.perf_counter() - start) * 1e3)
    return best
