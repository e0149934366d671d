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
model (random weights; the cost does not depend on values), copied until they span the last-level
cache, so that each timed pass streams its weights from memory as a model pass does. Timed on the two
shapes alone (34 MB of bf16), the weights stayed in a 300 MiB L3 on an Intel Xeon host (2026-12-06):
the probe chose AMX from 8 rows there in one start and from 2 rows in another, and from 8 rows the
packed bf16 kernel verified 4 rows in 225 ms against 115 ms (a 28-layer 1.5B pass; 1 row: 131-150 ms).
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import torch

from common.modeling.native import huge_empty

PROBE_ROWS = (2, 4, 8, 16, 32)  # rows (tokens per pass) timed on both paths
PROBE_SHAPES = ((2048, 1536), (1536, 8960))  # [N, K]: Qwen2.5-1.5B's qkv and down projections
PROBE_REPS = 2  # each path keeps its fastest of these runs
MIN_GAIN = 0.05  # AMX takes a row count only when at least 5% faster there (noise guard)
KINDS = {"w4a8": "TREESPEC_W4A8_AMX", "bf16": "TREESPEC_BF16_AMX"}  # kernel -> its A/B switch (0 = off)
STREAM_CACHES = 1  # the probe's weights span this many last-level caches (each pass streams from memory)
MAX_PROBE_BYTES = 1 << 30  # ... but no more than this many bytes of weights
CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")  # Linux sysfs: index*/size, e.g. "307200K"
DEFAULT_LLC_BYTES = 32 << 20  # assumed where sysfs lists no cache


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
    from which its AMX path runs (0: never; also without the path, see :func:`available`):
    ``choose_amx_rows(probe_amx_times(lib, kind))``. Raises KeyError for another kind."""
    return choose_amx_rows(probe_amx_times(lib, kind))


def probe_amx_times(lib, kind: str) -> dict[int, tuple[float, float]]:
    """rows -> (AVX-512 ms, AMX ms) for ``PROBE_ROWS``, each the fastest of ``PROBE_REPS`` runs over
    ``PROBE_SHAPES`` copied to span ``STREAM_CACHES`` last-level caches ({} without the path). About
    1.5-2 s per kind with a 300 MiB L3 on a 2-core host, well under 1 s with a 32 MiB one; holds up to
    ``MAX_PROBE_BYTES`` of weights meanwhile; leaves ``lib.<kind>_amx_rows`` as it found it. Raises
    KeyError for a kind not in ``KINDS``."""
    if not available(lib, kind):  # KeyError for an unknown kind
        return {}
    gen = torch.Generator().manual_seed(0)
    base = [_random_weight(lib, kind, n, k, gen) for n, k in PROBE_SHAPES]
    copies = probe_copies(sum(w.nbytes for w in base), last_level_cache_bytes())
    weights = base + [_copy(w) for _ in range(copies - 1) for w in base]
    attr = f"{kind}_amx_rows"
    saved, times = getattr(lib, attr), {}
    try:
        for rows in PROBE_ROWS:
            xs = [torch.randn(rows, w.k, generator=gen).bfloat16() for w in base] * copies
            times[rows] = tuple(_best_ms(lib, attr, weights, xs, amx) for amx in (False, True))
    finally:
        setattr(lib, attr, saved)
    return times


def last_level_cache_bytes(caches: Path = CPU_CACHES) -> int:
    """The largest cache sysfs lists under ``caches`` (bytes; sizes like ``"307200K"``, ``"2M"``),
    ``DEFAULT_LLC_BYTES`` where it lists none or cannot be read."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    sizes = []
    for f in caches.glob("index*/size"):
        try:
            text = f.read_text().strip()
        except OSError:
            continue
        digits, unit = (text[:-1], units[text[-1]]) if text[-1:] in units else (text, 1)
        if digits.isdigit():
            sizes.append(int(digits) * unit)
    return max(sizes, default=DEFAULT_LLC_BYTES)


def probe_copies(pair_bytes: int, llc_bytes: int) -> int:
    """Copies of the probe's weights (``pair_bytes`` each) that span ``STREAM_CACHES`` caches of
    ``llc_bytes``: at least 1, at most ``MAX_PROBE_BYTES`` in all."""
    want = -(-STREAM_CACHES * llc_bytes // pair_bytes)  # ceil
    return max(1, min(want, MAX_PROBE_BYTES // pair_bytes))


def _copy(w):
    """A copy of packed weight ``w`` in its own huge-page memory (as a model's weights are held)."""
    data = huge_empty(w.data.numel(), w.data.dtype)
    data.copy_(w.data)
    return dataclasses.replace(w, data=data)


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
