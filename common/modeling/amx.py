"""The row count from which a kernel of ``native.py`` takes its AMX path, measured at start.

Two kernels have an AMX path beside their AVX-512 one, over the same packed weights:

* ``w4a8`` (``csrc/w4a8_gemm.cpp``): VPDPBUSD (AVX512-VNNI) and AMX-INT8 tiles (TDPBSUD). Both give
  bit-identical results (exact int32 group sums, the same float epilogue), so a w4a8 main model may
  verify a tree on one path and decode plainly on the other and speculation stays lossless.
* ``bf16`` (``csrc/packed_gemm.cpp``): VDPBF16PS and AMX-BF16 tiles (TDPBF16PS); the two agree to
  fp32 summation order (the bf16 main's tree passes and plain steps already use different kernels).

The AVX-512 path is best for a plain decode step (1 row: the weight stream is the cost); for a token
tree or a prefill it is compute-bound (W4A8: about 4.5x its 1-row time at 16 rows on the 2-core Intel
Xeon host with AMX; bf16: 3.5x), the tiles are not (W4A8 2.5x; bf16 1.1x). Where the crossover lies
depends on the host: :func:`measure_amx_rows` times both paths on two projection shapes of a 1.5B
model (random weights; the cost does not depend on values).
"""

from __future__ import annotations

import os
import time

import torch

PROBE_ROWS = (2, 4, 8, 12, 16, 24, 32)  # rows (tokens per pass) timed on both paths
PROBE_SHAPES = ((2048, 1536), (1536, 8960))  # [N, K]: Qwen2.5-1.5B's qkv and down projections
PROBE_REPS = 3  # each path keeps its fastest of these runs
MIN_GAIN = 0.05  # AMX takes a row count only when at least 5% faster there (noise guard)
KINDS = {"w4a8": "TREESPEC_W4A8_AMX", "bf16": "TREESPEC_BF16_AMX"}  # kernel -> its A/B switch (0 = off)


def choose_amx_rows(times: dict[int, tuple[float, float]]) -> int:
    """The smallest probed row count from which AMX is ``MIN_GAIN`` faster at every larger probed
    count, else 0 (never). ``times``: rows -> (AVX-512 ms, AMX ms)."""
    start = 0
    for rows in sorted(times, reverse=True):
        avx_ms, amx_ms = times[rows]
        if amx_ms > (1 - MIN_GAIN) * avx_ms:
            break
        start = rows
    return start


def available(lib, kind: str) -> bool:
    """Whether ``lib`` (a ``native.PackedGemmLibrary``) has ``kind``'s AMX path (built for this
    CPU and granted by the OS) and its switch (``KINDS``) is not 0. Raises KeyError for a kind
    not in ``KINDS``."""
    switch = KINDS[kind]  # KeyError for a kind without an AMX path, on any host
    built = lib.w4a8_vnni and lib.w4a8_amx if kind == "w4a8" else lib.bf16_amx
    return bool(built) and os.environ.get(switch, "1") != "0"


def measure_amx_rows(lib, kind: str = "w4a8") -> int:
    """Time both paths of ``kind`` (``"w4a8"`` or ``"bf16"``) in ``lib`` and return the row count
    from which its AMX path runs (0: never; also without the path, see :func:`available`). About
    0.3 s on a 2-core host; leaves ``lib.<kind>_amx_rows`` as it found it. Raises KeyError for
    another kind."""
    if not available(lib, kind):  # KeyError for an unknown kind
        return 0
    gen = torch.Generator().manual_seed(0)
    weights = [_random_weight(lib, kind, n, k, gen) for n, k in PROBE_SHAPES]
    attr = f"{kind}_amx_rows"
    saved, times = getattr(lib, attr), {}
    try:
        for rows in PROBE_ROWS:
            xs = [torch.randn(rows, w.k, generator=gen).bfloat16() for w in weights]
            times[rows] = tuple(_best_ms(lib, attr, weights, xs, amx) for amx in (False, True))
    finally:
        setattr(lib, attr, saved)
    return choose_amx_rows(times)


def _random_weight(lib, kind: str, n: int, k: int, gen: torch.Generator):
    if kind == "bf16":
        return lib.pack((torch.randn(n, k, generator=gen) * 0.02).bfloat16())
    return lib.pack_w4a8(torch.randint(0, 16, (n, k), dtype=torch.uint8, generator=gen),
                         torch.full((k // 64, n, 2), 0.01, dtype=torch.bfloat16))


def _best_ms(lib, attr: str, weights, xs, amx: bool) -> float:
    setattr(lib, attr, 1 if amx else 0)
    best = float("inf")
    for _ in range(PROBE_REPS + 1):  # the first run warms caches and is dropped
        start = time.perf_counter()
        for w, x in zip(weights, xs):
            w.linear(x)
        best = min(best, (time.perf_counter() - start) * 1e3)
    return best
