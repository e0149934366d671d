"""What a small co-located process costs the model steps, in one process, by its CPU scheduling class.

The CPU kernels (treespec's packed/W4A8 GEMMs, torch's ops) split each operation across all the
process's OpenMP threads and wait at the end of it for the slowest one (fork-join). On a host with as
many cores as threads, another process that wakes for a moment (a scheduler, a gateway, an HTTP client)
preempts one of those threads and the other waits for it, so the steps can lose more than the CPU time
the other process takes. This script measures that: one engine (fixed tree, in process), every prompt
run once quiet and once per arm beside a process that busy-loops ``--burst-ms`` every ``--period-ms``
(run as ``normal``, ``nice`` = nice 10, or ``idle`` = SCHED_IDLE), the arms' order rotated from prompt
to prompt. Prints and writes (``--json``) per arm: wall seconds and the sums of the draft's and the
verifier's step times (ms, as the engine reports them), with the CPU model.

    PYTHONPATH=$PWD .venv/bin/python scripts/interference_ab.py --prompts 6 --arms normal,idle --json out.json

About 6 s per prompt per arm on a 2-core host (tree of 8 nodes, 64 tokens).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from common.config import load_config
from treespec.bench_data import load_prompts
from treespec.bench import write_json
from common.host import cpu_model
from treespec.bench_run import run_one
from treespec.bench_suite import Suite

BUSY = ("import time, sys\nb, p = float(sys.argv[1]) / 1e3, float(sys.argv[2]) / 1e3\n"
        "while True:\n    t = time.perf_counter()\n    while time.perf_counter() - t < b: pass\n    time.sleep(p)\n")
CLASSES = ("normal", "nice", "idle")


def start_busy(arm: str, burst_ms: float, period_ms: float) -> subprocess.Popen | None:
    """The interfering process of ``arm`` (None for "quiet"); raises ValueError for an unknown arm."""
    if arm == "quiet":
        return None
    if arm not in CLASSES:
        raise ValueError(f"unknown arm {arm!r}: use {', '.join(CLASSES)}")

    def demote() -> None:  # runs in the child before exec
        if arm == "nice":
            os.nice(10)
        elif arm == "idle":
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    return subprocess.Popen([sys.executable, "-c", BUSY, str(burst_ms), str(period_ms)], preexec_fn=demote)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--arms", default="normal,idle", help=f"comma list of {', '.join(CLASSES)} (quiet always runs)")
    ap.add_argument("--burst-ms", type=float, default=1.0)
    ap.add_argument("--period-ms", type=float, default=8.0)
    ap.add_argument("--tree-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    arms = ["quiet"] + [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms[1:] if a not in CLASSES]
    if unknown:  # before the models load
        print(f"interference_ab: unknown arm(s) {', '.join(unknown)}: use {', '.join(CLASSES)}", file=sys.stderr)
        return 2
    prompts = load_prompts("humaneval", args.prompts + 1)
    suite = Suite(load_config(None, {"tree_size": args.tree_size}), prompts, args.max_new_tokens, 1)
    engine = suite.engine(suite.tree)
    run_one(engine, "warm", suite.ids[-1], 16, False)  # a prompt not measured: no prefix-cache hit below
    got = {a: {"wall_s": 0.0, "draft_ms": 0.0, "verify_ms": 0.0, "steps": 0} for a in arms}
    for i in range(args.prompts):
        for arm in arms[i % len(arms):] + arms[:i % len(arms)]:
            busy = start_busy(arm, args.burst_ms, args.period_ms)
            time.sleep(0.2)
            d0, v0 = len(engine.stats.draft_ms), len(engine.stats.verify_ms)
            r = run_one(engine, f"p{i}-{arm}", suite.ids[i], args.max_new_tokens, False, ignore_eos=True)
            if busy is not None:
                busy.kill()
                busy.wait()
            g = got[arm]
            g["wall_s"] += r.seconds
            g["draft_ms"] += sum(engine.stats.draft_ms[d0:])
            g["verify_ms"] += sum(engine.stats.verify_ms[v0:])
            g["steps"] += len(engine.stats.draft_ms) - d0
    out = {"cpu_model": cpu_model(), "args": vars(args), "arms": got,
           "vs_quiet": {a: round(got[a]["wall_s"] / got["quiet"]["wall_s"], 3) for a in arms}}
    print(json.dumps(out, indent=1))
    if args.json:
        write_json(args.json, out)  # atomic: no half-written file
    return 0


if __name__ == "__main__":
    sys.exit(main())
