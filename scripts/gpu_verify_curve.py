"""Verification cost by token count on a GPU, at the real models' shapes (random weights).

The H200 machine this project is sometimes lent cannot hold the Qwen GGUF files (64 MiB
transfer limit, no network there), so this builds bf16 models with the exact shapes of
Qwen2.5-Coder-1.5B (main) and -0.5B (draft) and random weights, and times one forward
pass of T tokens (1 pending + a chain of T - 1 tree nodes) after a committed prefix with
``runner.measure_forward_ms``, the function the verifier and draft workers use at start
for ``tree_size = auto``. Per shape it reports, in ms:

- ``synced``: that function as shipped (device synced around every timed pass),
- ``events``: CUDA events around the same passes (a cross-check of ``synced``),
- ``launch_only``: the same function with the sync removed, i.e. what the clock read before
  the sync was added (kernel launches, not kernels).

Usage (needs CUDA)::

    python scripts/gpu_verify_curve.py --out verify_curve.json [--prefix 64,1024] [--reps 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from common.modeling import runner  # noqa: E402
from common.modeling.model import DecoderModel, ModelSpec  # noqa: E402
from common.modeling.tiny import tiny_weights  # noqa: E402

SHAPES = {  # Qwen2.5-Coder-1.5B / -0.5B (their GGUF files' hyperparameters)
    "qwen2.5-1.5b": ModelSpec(vocab_size=151936, hidden_size=1536, num_layers=28, num_heads=12, num_kv_heads=2,
                              head_dim=128, intermediate_size=8960, rope_theta=1e6, rms_eps=1e-6, qkv_bias=True),
    "qwen2.5-0.5b": ModelSpec(vocab_size=151936, hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2,
                              head_dim=64, intermediate_size=4864, rope_theta=1e6, rms_eps=1e-6, qkv_bias=True),
}
GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def random_model(spec: ModelSpec, device: str) -> DecoderModel:
    """bf16 weights of ``spec`` from ``tiny.tiny_weights`` (std 0.02 for the layers), moved to ``device``."""
    weights = tiny_weights(spec, seed=0, dtype=torch.bfloat16, scale=0.25)
    return DecoderModel(spec, {k: v.to(device) for k, v in weights.items()}, torch.bfloat16, device)


def event_curve(model: DecoderModel, prefix: int, reps: int) -> dict[int, float]:
    """Median ms per pass of T tokens by CUDA events, after ``prefix`` committed tokens."""
    cache = model.new_cache(1, prefix + max(GRID) + 1)
    slot = cache.allocate()
    runner.forward_segments(model, cache, [slot], [list(range(prefix))], [np.zeros(0, np.int64)],
                            [np.zeros(0, np.int32)])
    cache.commit(slot, list(range(prefix)))
    out = {}
    for t in GRID:
        tree = np.arange(1, t, dtype=np.int64), np.arange(-1, t - 2, dtype=np.int32)
        times = []
        for _ in range(reps + 2):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            runner.forward_segments(model, cache, [slot], [[1]], [tree[0]], [tree[1]])
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        out[t] = round(statistics.median(times[2:]), 3)
    return out


def measure(model: DecoderModel, prefix: int, reps: int) -> dict:
    """synced / launch_only (runner.measure_forward_ms, fastest of reps) and events curves, ms."""
    size = prefix + max(GRID) + 1
    synced = runner.measure_forward_ms(model, model.new_cache(1, size), GRID, reps, prefix_len=prefix)
    sync, runner.synchronize = runner.synchronize, lambda device: None  # the clock before the sync was added
    try:
        launch = runner.measure_forward_ms(model, model.new_cache(1, size), GRID, reps, prefix_len=prefix)
    finally:
        runner.synchronize = sync
    return {"prefix": prefix, "synced": {t: round(ms, 3) for t, ms in synced},
            "launch_only": {t: round(ms, 3) for t, ms in launch}, "events": event_curve(model, prefix, reps)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--prefix", default="64,1024", help="committed tokens before the timed pass (comma list)")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_verify_curve.py needs CUDA (torch.cuda.is_available() is False)")
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "dtype": "bfloat16",
              "weights": "random N(0, 0.02), real shapes", "grid_tokens": list(GRID), "models": {}}
    for name, spec in SHAPES.items():
        model = random_model(spec, "cuda")
        runner.measure_forward_ms(model, model.new_cache(1, 400), GRID[:8], 1)  # warm-up: Triton compiles
        result["models"][name] = [measure(model, int(p), args.reps) for p in args.prefix.split(",")]
        del model
        torch.cuda.empty_cache()
        print(json.dumps({name: result["models"][name]}), flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
