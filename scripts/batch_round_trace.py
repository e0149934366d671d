"""Round by round, in one process: plain decoding against ``tree_size = auto`` at a batch of 8.

Runs ``--groups`` groups of 8 HumanEval prompts (128 tokens each, EOS ignored: the HTTP bench's 8-stream
workload) through a plain engine and an ``auto`` engine on the same loaded pair, the arms' order
alternating per group. Every round's scheduler ``round`` log event (draft and verify ms, batch, tokens
committed, tree nodes, lookup grafts) is recorded with the round's tree shape and explore shape, and the
rounds are summed by kind (plain, a tree shape, explore, with lookup grafts): rounds, mean batch, mean
draft and verify ms, committed tokens per ms. The first round of each group (the prompts' prefill) is
left out of the kinds. ``--sdpa`` runs the main model's attention on SDPA (as before
``build._verify_pass_attention``). Writes every round as JSON with the CPU model.

    PYTHONPATH=$PWD .venv/bin/python scripts/batch_round_trace.py --json out.json [--groups 2] [--sdpa]
"""

from __future__ import annotations

import argparse
import collections
import json
import time

from common.config import load_config
from treespec.bench_data import load_prompts
from common.host import cpu_model
from treespec.bench_run import run_concurrent, run_one
from treespec.bench_suite import Suite

BATCH = 8


class RoundLog:
    """A driver log that keeps every ``round`` event (with the engine's tree shape and the policy's reason at that moment)."""

    def __init__(self, engine, arm: str, rows: list[dict]) -> None:
        self.engine, self.arm, self.rows = engine, arm, rows

    def info(self, event: str, **kw) -> None:
        if event == "round":
            planner = self.engine.driver.planner
            self.rows.append({"arm": self.arm, "shape": list(planner.shape), "explore": planner.policy.explore_shape,
                              "reason": planner.policy.last_reason, "t": time.perf_counter(), **kw})

    def __getattr__(self, name):  # warning, debug, ...: dropped
        return lambda *args, **kwargs: None


def kind(row: dict) -> str:
    """'plain', or 'SIZExDEPTH', plus '+explore' and '+lookup' where the round had them."""
    size, depth = row["shape"]
    name = "plain" if size == 0 else f"{size}x{depth}"
    return name + ("+explore" if row["explore"] else "") + ("+lookup" if row.get("lookup_grafts") else "")


def summarize(rows: list[dict]) -> dict[str, dict]:
    """Per kind: rounds, mean batch, mean draft / verify ms, committed tokens per ms."""
    groups = collections.defaultdict(list)
    for r in rows:
        groups[kind(r)].append(r)
    out = {}
    for k, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        ms = sum(r["draft_ms"] + r["verify_ms"] for r in rs)
        tokens = sum(sum(r["accepted"]) for r in rs)
        out[k] = {"rounds": len(rs), "batch": sum(r["batch"] for r in rs) / len(rs),
                  "draft_ms": sum(r["draft_ms"] for r in rs) / len(rs),
                  "verify_ms": sum(r["verify_ms"] for r in rs) / len(rs), "tokens_per_ms": tokens / ms}
    return out


def main() -> None:
    """Run the groups on both arms, print each group's summary, write the rounds."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--sdpa", action="store_true", help="the main model attends with SDPA in every pass")
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    suite = Suite(load_config(None, {}), load_prompts("humaneval", BATCH * args.groups), 128, 1)
    if args.sdpa:
        suite.main.exact_lib = None
    rows: list[dict] = []
    engines = {"plain": suite.engine((0, 0), slots=BATCH), "auto": suite.engine(None, slots=BATCH)}
    for arm, engine in engines.items():
        run_one(engine, "warm", suite.ids[0], 16, False)
        engine.driver.log = RoundLog(engine, arm, rows)
    groups = []
    for g in range(args.groups):
        for arm in (["plain", "auto"] if g % 2 == 0 else ["auto", "plain"]):
            first = len(rows)
            r = run_concurrent(engines[arm], suite.ids[g * BATCH:(g + 1) * BATCH], 128, ignore_eos=True)
            tokens, seconds = r["tokens"], r["seconds"]
            kinds = summarize(rows[first + 1:])  # the group's first round is its prefill
            groups.append({"group": g, "arm": arm, "tokens": tokens, "seconds": seconds, "kinds": kinds})
            print(f"group {g} {arm}: {tokens / seconds:.2f} tok/s, {len(rows) - first} rounds")
            for k, v in kinds.items():
                print(f"   {k:20s} {v['rounds']:3d} rounds  batch {v['batch']:4.1f}  draft {v['draft_ms']:6.1f} ms"
                      f"  verify {v['verify_ms']:6.1f} ms  {v['tokens_per_ms']:.4f} tokens/ms")
    with open(args.json, "w") as f:
        json.dump({"cpu": cpu_model(), "sdpa": args.sdpa, "groups": groups, "rounds": rows}, f, indent=1)


if __name__ == "__main__":
    main()
