"""Time the Triton tree-attention kernel against PyTorch SDPA with a dense boolean mask.

Shapes are the verifier's (Qwen2.5-1.5B: 12 query heads, 2 KV heads, head_dim 128): one
sequence with a committed prefix of P tokens, one pending token and a random tree of N
nodes. Reports per (N, P) the median latency (ms, CUDA events) of
``triton`` (mask packing + kernel, what ``tree_attention`` runs on CUDA),
``triton_kernel`` (pre-packed mask) and ``sdpa_dense`` (the CPU path's SDPA on the GPU),
plus the max abs difference. Usage::

    python scripts/bench_tree_attention.py --out bench_attn.json [--device cuda]

``--device cpu`` runs the kernel under the Triton interpreter (a smoke test only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1] == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"  # must precede the triton import
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from common.modeling.attention import build_batch  # noqa: E402
from common.modeling.kv_cache import KVCache  # noqa: E402
from common.modeling.triton_attention import compact_mask, tree_attention_compact, tree_attention_triton  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM = 12, 2, 128


def timed(fn, device: str, warmup: int, iters: int) -> float:
    """Median wall time of ``fn()`` in milliseconds (CUDA events on GPU)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _sdpa(q, cache, mask):
    """Dense-mask SDPA with GQA folding (same math as ``attention.tree_attention`` on CPU)."""
    B, T, H, D = q.shape
    S = mask.shape[-1]
    g = H // KV_HEADS
    k = cache.k[0, 0, :S].unsqueeze(0).transpose(1, 2)  # [1, kvh, S, D]
    v = cache.v[0, 0, :S].unsqueeze(0).transpose(1, 2)
    qg = q.view(B, T, KV_HEADS, g, D).permute(0, 2, 3, 1, 4).reshape(B, KV_HEADS, g * T, D)
    out = torch.nn.functional.scaled_dot_product_attention(qg, k, v, attn_mask=mask.repeat(1, 1, g, 1))
    return out.view(B, KV_HEADS, g, T, D).permute(0, 3, 1, 2, 4).reshape(B, T, H * D)


def one_case(nodes: int, prefix: int, dtype, device: str, warmup: int, iters: int) -> dict:
    rng = np.random.default_rng(nodes * 7919 + prefix)
    parents = np.array([rng.integers(-1, i) for i in range(nodes)], np.int32)
    cache = KVCache(1, 1, prefix + nodes + 1, KV_HEADS, HEAD_DIM, dtype, device)
    cache.k.normal_()
    cache.v.normal_()
    cache.lengths[0] = prefix
    _, _, mask = build_batch([prefix], [[1]], [np.zeros(nodes, np.int64)], [parents])
    mask = mask.to(device)
    q = torch.randn(1, nodes + 1, HEADS, HEAD_DIM, device=device).to(dtype)
    starts = torch.tensor([prefix], device=device)
    slots = torch.tensor([0], device=device)
    vis, bits = compact_mask(mask, starts)
    res = {"nodes": nodes, "prefix": prefix, "dtype": str(dtype)}
    res["triton_ms"] = timed(lambda: tree_attention_triton(q, cache, 0, [0], mask), device, warmup, iters)
    res["triton_kernel_ms"] = timed(lambda: tree_attention_compact(q, cache.k[0], cache.v[0], slots, starts, vis,
                                                                   bits), device, warmup, iters)
    res["sdpa_dense_ms"] = timed(lambda: _sdpa(q, cache, mask), device, warmup, iters)
    diff = tree_attention_triton(q, cache, 0, [0], mask).float() - _sdpa(q, cache, mask).float()
    res["max_abs_diff"] = float(diff.abs().max())
    res["speedup_vs_sdpa"] = res["sdpa_dense_ms"] / res["triton_ms"]
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--nodes", default="16,64,128")
    ap.add_argument("--prefixes", default="512,4096")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=100)
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    rows = [one_case(n, p, dtype, args.device, args.warmup, args.iters)
            for p in map(int, args.prefixes.split(",")) for n in map(int, args.nodes.split(","))]
    info = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu (interpreter)",
            "torch": torch.__version__, "heads": HEADS, "kv_heads": KV_HEADS, "head_dim": HEAD_DIM}
    with open(args.out, "w") as f:
        json.dump({"info": info, "results": rows}, f, indent=2)
    for r in rows:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
