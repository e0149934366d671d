"""Where one forward pass's time goes on a GPU, and what CUDA-graph replay of the same pass costs.

``scripts/gpu_verify_curve.py`` found a Qwen2.5-1.5B-shaped bf16 pass flat at ~27 ms on an H200 from
1 to 256 tokens: bound by the host, not the GPU. This script measures, per model shape (random
weights, as in that script) and per token count T (1 pending + a chain of T - 1 tree nodes after a
64-token prefix):

- ``eager_ms``: ``DecoderModel.forward`` as shipped, median by CUDA events over ``--reps`` passes
  (the batch tensors already on the device, as ``runner.forward_segments`` leaves them);
- ``profile``: from ``torch.profiler`` over 3 passes, per pass: CUDA kernels launched, the sum of
  their GPU time (ms; what the pass would cost if launches were free) and the host ops with the most
  self CPU time;
- ``graph_ms``: the same pass captured once in a ``torch.cuda.CUDAGraph`` and replayed (median by
  CUDA events), with the largest absolute difference from the eager pass's output; or the error that
  stopped the capture. The tree-attention object is built before the capture (its host-to-device
  copy of slot ids cannot be captured), as a graph-captured engine would build it per batch shape.

Usage (CUDA; ``--device cpu --tiny`` only smoke-tests the profile part)::

    python scripts/gpu_pass_profile.py --out pass_profile.json [--tokens 1,16,64] [--reps 20]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from bench_tree_attention import timed  # noqa: E402
from gpu_verify_curve import SHAPES, random_model  # noqa: E402

from common.modeling import attention, model as model_mod, runner  # noqa: E402
from common.modeling.tiny import tiny_spec  # noqa: E402

PREFIX = 64


def pass_inputs(model, cache, slot: int, t: int) -> tuple:
    """(tokens, positions, mask) ``[1, T]`` int64, ``[1, T]`` int64, ``[1, 1, T, S]`` bool on the device."""
    tree = np.arange(1, t, dtype=np.int64), np.arange(-1, t - 2, dtype=np.int32)
    tok, pos, mask = attention.build_batch([cache.lengths[slot]], [[1]], [tree[0]], [tree[1]])
    return tok.to(model.device), pos.to(model.device), mask.to(model.device)


def profile(fn, device: str, passes: int = 3) -> dict:
    """Per pass: CUDA kernels launched, their summed GPU ms, and the 8 host ops with most self CPU ms."""
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(passes):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    table = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:8]
    return {"kernels_per_pass": len(kernels) / passes,
            "gpu_kernel_ms_per_pass": round(sum(e.device_time for e in kernels) / 1e3 / passes, 3),
            "top_host_ops": [{"op": e.key, "calls_per_pass": e.count / passes,
                              "self_cpu_ms_per_pass": round(e.self_cpu_time_total / 1e3 / passes, 3)} for e in table]}


def graph(model, cache, slot: int, inputs: tuple, reps: int) -> dict:
    """Capture one pass in a CUDA graph and replay it: median ms and max |graph - eager| of the output."""
    tok, pos, mask = inputs
    eager = model.forward(tok, pos, cache, [slot], mask).float()
    attend = attention.tree_attention_for(mask, cache, [slot])
    saved = model_mod.tree_attention_for
    model_mod.tree_attention_for = lambda *a: attend  # built once, outside the capture
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model.forward(tok, pos, cache, [slot], mask)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = model.forward(tok, pos, cache, [slot], mask)
        ms = round(timed(g.replay, "cuda", 2, reps), 3)
        return {"graph_ms": ms, "max_abs_diff": float((out.float() - eager).abs().max())}
    except (RuntimeError, TypeError, ValueError) as e:  # what a failed capture raises; the run goes on
        return {"graph_error": f"{type(e).__name__}: {str(e)[:400]}"}
    finally:
        model_mod.tree_attention_for = saved


def measure(model, tokens: list[int], reps: int, device: str) -> list[dict]:
    """One record per token count (see the module docstring)."""
    cache = model.new_cache(1, PREFIX + max(tokens) + 1)
    slot = cache.allocate()
    runner.forward_segments(model, cache, [slot], [list(range(PREFIX))], [np.zeros(0, np.int64)],
                            [np.zeros(0, np.int32)])
    cache.commit(slot, list(range(PREFIX)))
    rows = []
    for t in tokens:
        inputs = pass_inputs(model, cache, slot, t)
        fn = lambda: model.forward(inputs[0], inputs[1], cache, [slot], inputs[2])  # noqa: E731
        row = {"tokens": t, "eager_ms": round(timed(fn, device, 2, reps), 3), "profile": profile(fn, device)}
        if device == "cuda":
            row.update(graph(model, cache, slot, inputs, reps))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--tokens", default="1,16,64", help="tokens per pass (comma list)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--tiny", action="store_true", help="a tiny random model instead of the real shapes")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_pass_profile.py needs CUDA (torch.cuda.is_available() is False); --device cpu --tiny smoke-tests it")
    shapes = {"tiny": tiny_spec(vocab_size=512)} if args.tiny else SHAPES
    tokens = [int(t) for t in args.tokens.split(",")]
    result = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "torch": torch.__version__,
              "dtype": "bfloat16", "prefix_tokens": PREFIX, "models": {}}
    for name, spec in shapes.items():
        model = random_model(spec, args.device)
        runner.measure_forward_ms(model, model.new_cache(1, 200), (1, 16, 64), 1)  # warm-up (Triton compiles)
        result["models"][name] = measure(model, tokens, args.reps, args.device)
        del model
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
