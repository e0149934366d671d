"""Milliseconds for the seven projection matrices of one Qwen2.5-1.5B layer (random
weights) at 1..256 rows: bf16 ``F.linear``, the int8 kernel (``_weight_int8pack_mm``),
int8 cast + dense GEMM (``Int8Weight``'s path above ``INT8_MAX_ROWS``) and the int4
kernel, side by side in one run. Justifies ``INT8_MAX_ROWS`` in common/modeling/quant.py.

Usage: nice -n 19 .venv/bin/python scripts/quant_kernels.py   (prints one line per row count)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.modeling.quant import int4_linear, quantize_int4, quantize_int8  # noqa: E402

SHAPES = [(2048, 1536), (1536, 1536), (17920, 1536), (1536, 8960)]  # qkv, o, gate_up, down: [N, K]


def best_ms(fn, reps: int = 3) -> float:
    """Best of ``reps`` timings of ``fn()`` in ms, after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) * 1e3


def main() -> int:
    torch.manual_seed(0)
    dense = [torch.randn(n, k).to(torch.bfloat16) * 0.02 for n, k in SHAPES]
    q8 = [quantize_int8(w, torch.bfloat16) for w in dense]
    q4 = [quantize_int4(w) for w in dense]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for rows in (1, 4, 8, 16, 32, 64, 256):
        xs = [torch.randn(rows, k).to(torch.bfloat16) for _, k in SHAPES]
        bf = best_ms(lambda: [F.linear(x, w) for x, w in zip(xs, dense)])
        i8 = best_ms(lambda: [torch.ops.aten._weight_int8pack_mm(x, q, s) for x, (q, s) in zip(xs, q8)])
        cast = best_ms(lambda: [F.linear(x, q.to(x.dtype)) * s for x, (q, s) in zip(xs, q8)])
        i4 = best_ms(lambda: [int4_linear(x, *p) for x, p in zip(xs, q4)])
        print(f"rows {rows:4d}: bf16 {bf:7.2f}  int8 kernel {i8:7.2f}  int8 cast+GEMM {cast:7.2f}  "
              f"int4 kernel {i4:7.2f} ms/layer", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
