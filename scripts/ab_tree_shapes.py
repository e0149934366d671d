"""A/B, in one process, of the ``tree_size = auto`` policy against fixed tree shapes.

One engine per arm (``auto``, or ``SIZExDEPTH`` for a fixed tree of SIZE nodes and at most DEPTH
levels, or ``plain``), all on the same loaded model pair and the same start-up cost curves; every
prompt runs on every arm at batch 1, the arms' order reversed on every other prompt so that a slow
phase of the host hits all of them. Greedy; prints the running tokens/s per arm after each prompt
and, at the end, each arm's tokens/s (end to end, time to first token included) and tokens per
round; writes them as JSON with the CPU model. The auto arm's policy keeps learning across prompts,
as a deployment's does.

    .venv/bin/python scripts/ab_tree_shapes.py humaneval 20 auto,8x8,12x10,16x12 --json out.json

About 1.5 minutes per arm per 20 HumanEval prompts on a 2-core host.
"""

from __future__ import annotations

import argparse
import json

from common.config import load_config
from treespec.bench_data import load_prompts
from treespec.bench_llamacpp import cpu_model
from treespec.bench_run import run_one
from treespec.bench_suite import Suite


def parse_arm(text: str) -> tuple[int, int] | None:
    """``auto`` -> None (the policy), ``plain`` -> (0, 0), ``8x8`` -> (8, 8). Raises ValueError."""
    if text == "auto":
        return None
    if text == "plain":
        return 0, 0
    size, depth = (int(x) for x in text.split("x"))
    return size, depth


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("limit", type=int)
    ap.add_argument("arms", help="comma list of auto, plain or SIZExDEPTH")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    names = args.arms.split(",")
    suite = Suite(load_config(None, {}), load_prompts(args.dataset, args.limit), args.max_new_tokens, 1)
    engines = [suite._engine(parse_arm(n)) for n in names]
    for e in engines:  # warm-up: first-call allocations stay out of the timings
        run_one(e, "warm", suite.ids[0], 16, False)
    totals = [{"tokens": 0, "seconds": 0.0, "rounds": 0} for _ in names]
    for i, ids in enumerate(suite.ids):
        order = range(len(names)) if i % 2 == 0 else reversed(range(len(names)))
        for k in order:
            r = run_one(engines[k], f"p{i}", ids, args.max_new_tokens, False)
            totals[k]["tokens"] += len(r.tokens)
            totals[k]["seconds"] += r.seconds
            totals[k]["rounds"] += len(r.committed) + 1  # + the prefill round
        print(i, " ".join(f"{n}: {t['tokens'] / t['seconds']:.2f}" for n, t in zip(names, totals)), flush=True)
    arms = {n: {**t, "tokens_per_s": t["tokens"] / t["seconds"], "tokens_per_round": t["tokens"] / t["rounds"]}
            for n, t in zip(names, totals)}
    for n, a in arms.items():
        print(f"{n}: {a['tokens_per_s']:.2f} tok/s, {a['tokens_per_round']:.2f} tokens per round")
    with open(args.json, "w") as f:
        json.dump({"cpu": cpu_model(), "dataset": args.dataset, "prompts": len(suite.ids),
                   "max_new_tokens": args.max_new_tokens, "arms": arms}, f, indent=2)


if __name__ == "__main__":
    main()
