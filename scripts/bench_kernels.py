"""Matmul kernels on the real model pair, before vs after the start-up choice, in one run.

For the main and the draft model (real weights, as ``treespec`` loads them: main bf16,
draft int4 with its bf16 copy), prints and writes to JSON:
  * per kernel and row count: ms for layer 0's projections times the layer count (one
    model pass of projections), and for the LM head (kernel_probe.probe_timings);
  * the plan chosen from those timings (kernels.choose);
  * the whole forward pass over 1/4/8/16/32 tokens after a 64-token prefix, default
    kernels vs the plan, alternating (runner.measure_forward_ms; fastest of the runs);
  * optionally the time torch.compile takes for one projection (``--compile``).
Ratios are what to read: the host may be loaded by other work. On a loaded host,
``--threads 1 --cpu-clock`` times with this process's CPU time (time.process_time), which
preemption by other processes does not inflate (valid for one thread only).

Usage: PYTHONPATH=. python scripts/bench_kernels.py [--reps 5] [--rounds 2] [--compile]
       [--threads N] [--cpu-clock] [--out benchmarks/results/kernels/<cpu>.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import subprocess
import time
from pathlib import Path

import torch

from common.config import Config
from common.modeling import build
from common.host import cpu_model
from common.modeling.kernel_probe import HEAD, KernelPlan, probe_timings, use_plan
from common.modeling.kernels import ROW_BUCKETS, candidates, choose
from common.modeling.runner import measure_forward_ms

PASS_GRID = (1, 4, 8, 16, 32)
FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "amx_int8")


def host() -> dict:
    """CPU model, the matmul-relevant CPU flags, torch version and threads."""
    flags = set(Path("/proc/cpuinfo").read_text().split()) if Path("/proc/cpuinfo").exists() else set()
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    name = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines() if ln.startswith("Model name")), cpu_model())
    return {"cpu": name, "flags": {f: f in flags for f in FLAGS}, "torch": torch.__version__,
            "threads": torch.get_num_threads()}


def timer(clock):
    """A kernel_probe timer reading ``clock`` (seconds)."""
    def run(label, fn) -> float:
        start = clock()
        fn()
        return (clock() - start) * 1e3
    return run


def projections(model, reps: int, clock) -> tuple[dict, dict]:
    """(timings "format/rows/kernel" -> ms per pass, ladders) on ``model``'s own weights."""
    t = probe_timings(model.w, model.head_weight, model.spec.num_layers, timer(clock), budget_s=1e9, reps=reps)
    defaults = {HEAD: candidates(model.head_weight)[0]}
    defaults.update({f: candidates(model.w["layers.0.qkv.weight"])[0] for f, _, _ in t if f != HEAD})
    return {f"{f}/{r}/{k}": round(ms, 2) for (f, r, k), ms in t.items()}, choose(t, defaults)


def forward_passes(model, plan: KernelPlan, rounds: int, clock) -> dict:
    """Whole forward ms per token count, default kernels vs ``plan``, alternating rounds."""
    fast = copy.copy(model)
    fast.w, fast.kernel_plan = dict(model.w), None
    use_plan(fast, plan)
    best: dict[str, dict[int, float]] = {"default": {}, "chosen": {}}
    for _ in range(rounds):
        for label, m in (("default", model), ("chosen", fast)):
            for t, ms in measure_forward_ms(m, m.new_cache(1, 64 + max(PASS_GRID) + 1), PASS_GRID, reps=2, clock=clock):
                best[label][t] = min(best[label].get(t, float("inf")), round(ms, 2))
    best["speedup"] = {t: round(best["default"][t] / best["chosen"][t], 3) for t in best["default"]}
    return best


def compile_cost(model, clock) -> dict:
    """torch.compile of layer 0's qkv projection: wall seconds of the first call (compile,
    Inductor's workers included), then ms per call next to F.linear and prepacked oneDNN."""
    w = model.w["layers.0.qkv.weight"]
    w = w if isinstance(w, torch.Tensor) else w.dense
    fn = torch.compile(lambda x: torch.nn.functional.linear(x, w), dynamic=False)
    x = torch.randn(8, w.shape[1], dtype=w.dtype)
    start = time.perf_counter()
    fn(x)
    compile_s = time.perf_counter() - start
    packed = torch.ops.mkldnn._reorder_linear_weight(w)
    run = timer(clock)
    best = {name: round(min(run(("", 8, name), f) for _ in range(20)), 3) for name, f in (
        ("compiled", lambda: fn(x)), ("linear", lambda: torch.nn.functional.linear(x, w)),
        ("onednn", lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")))}
    return {"compile_wall_s": round(compile_s, 1), "ms_8_rows": best}


def run_role(role: str, args) -> dict:
    cfg = Config(kernel_probe=False)
    start = time.perf_counter()
    model = (build.main_model if role == "main" else build.draft_model)(cfg)[0]
    out = {"model": cfg.main_model_path if role == "main" else cfg.draft_model_path,
           "layers": model.spec.num_layers, "load_s": round(time.perf_counter() - start, 1)}
    clock = time.process_time if args.cpu_clock else time.perf_counter
    out["projection_ms"], ladders = projections(model, args.reps, clock)
    out["plan"] = {f: [list(s) for s in steps] for f, steps in ladders.items()}
    print(role, json.dumps(out), flush=True)
    out["forward_ms"] = forward_passes(model, KernelPlan(ladders, source="probe"), args.rounds, clock)
    print(role, "forward", json.dumps(out["forward_ms"]), flush=True)
    if args.compile:
        out["torch_compile"] = compile_cost(model, clock)
        print(role, "compile", json.dumps(out["torch_compile"]), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--roles", default="main,draft")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    parser.add_argument("--cpu-clock", action="store_true", help="time with process CPU time (needs --threads 1)")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.cpu_clock and torch.get_num_threads() != 1:
        parser.error("--cpu-clock counts CPU time of all threads: use it with --threads 1")
    result = {"host": host(), "row_buckets": ROW_BUCKETS, "clock": "process_time" if args.cpu_clock else "wall"}
    print(json.dumps(result["host"]), flush=True)
    for role in args.roles.split(","):
        result[role] = run_role(role, args)
    slug = re.sub(r"[^a-z0-9]+", "-", result["host"]["cpu"].lower()).strip("-")
    name = f"{slug}-threads{torch.get_num_threads()}-{result['clock']}"
    out = Path(args.out or f"benchmarks/results/kernels/{name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
