"""Fused decoder ops (csrc/decoder_ops.cpp) against torch's, on the real models, in one run.

For the draft and the main model as ``treespec`` loads them (bf16; draft int4 with an int8 LM
head), times one forward over 1/4/8/16 tokens after a 64-token prefix with torch's element-wise
ops and with the fused C++ ops, alternating rounds (fastest of all runs per cell), and checks that
both give the same greedy tokens over a 400-token prompt. Prints and writes JSON with the CPU model.

Usage: PYTHONPATH=. python scripts/bench_fused_ops.py [--rounds 3] [--out benchmarks/results/kernels/fused_ops.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import numpy as np
import torch

from common.config import Config
from common.modeling import build, fused_ops
from common.modeling.runner import forward_segments, measure_forward_ms

GRID = (1, 4, 8, 16)


def cpu_name() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "unknown")


def agreement(model, cache, tok, text: str) -> float:
    """Share of positions where torch's and the fused ops' greedy next token agree."""
    ids = tok(text)["input_ids"][:400]
    argmax = {}
    for name, ops in (("torch", fused_ops.TorchOps()), ("fused", model.ops)):
        model.ops, slot = ops, cache.allocate()
        try:
            hidden = forward_segments(model, cache, [slot], [ids], [np.zeros(0, np.int64)], [np.zeros(0, np.int32)])[0]
            argmax[name] = model.logits(hidden).argmax(-1)
        finally:
            cache.free(slot)
    return float((argmax["torch"] == argmax["fused"]).float().mean())


def measure(model, tok, rounds: int) -> dict:
    """ms per forward (torch ops vs fused) at each GRID size and the greedy agreement."""
    fused, cache = model.ops, model.new_cache(2, 1024)
    if not isinstance(fused, fused_ops.NativeOps):
        raise SystemExit("the fused ops did not load (no g++, or TREESPEC_NATIVE_KERNEL=0)")
    runs: dict[str, list] = {"torch": [], "fused": []}
    for _ in range(rounds):
        for name, ops in (("torch", fused_ops.TorchOps()), ("fused", fused)):
            model.ops = ops
            runs[name].append(dict(measure_forward_ms(model, cache, grid=GRID, reps=3)))
    model.ops = fused
    best = {name: {t: min(r[t] for r in rs) for t in GRID} for name, rs in runs.items()}
    text = Path(build.__file__).read_text()
    return {"ms": best, "ratio": {t: best["torch"][t] / best["fused"][t] for t in GRID},
            "greedy_agreement": agreement(model, cache, tok, text)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    cfg = Config()
    result = {"cpu": cpu_name(), "torch": torch.__version__, "threads": torch.get_num_threads()}
    for role, load in (("draft", build.draft_model), ("main", build.main_model)):
        model, tok = load(cfg)
        result[role] = measure(model, tok, args.rounds)
        del model
        print(role, json.dumps(result[role]))
    print(f"cpu: {result['cpu']}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
