"""One HTTP stream against the same speculation in process, with both arms' rounds side by side.

Runs ``treespec.bench_interleave.interleave`` (what ``treespec bench --url URL --baseline in-process``
runs: every prompt once over HTTP and once in this process, the order mirrored pair by pair) and
records every ``round`` event of the in-process engine; the deployment's rounds come from its
scheduler log (``<log_dir>/scheduler-0.log``, the events after this script started). For both arms
it prints the mean per round of: the wall time between consecutive rounds, the draft and verify ms
(the scheduler's view: for the deployment, from sending a step to its reply), the rest ("other":
scheduling, and for the deployment the messages), tokens committed, tree nodes and prompt-lookup
grafts. Rounds longer than 400 ms (the prompts' prefill) are left out. ``--plain``: both arms decode
plainly, which times the verifier's own step in both processes. Start a fresh deployment
first (its prefix cache would otherwise serve prompts it has seen) with the same tree size:

    .venv/bin/treespec up --tree-size 8 --set log_dir=/tmp/ts &
    PYTHONPATH=$PWD .venv/bin/python scripts/http_vs_inprocess_rounds.py /tmp/ts/scheduler-0.log \\
        --tree-size 8 --limit 8 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from common.config import load_config
from http_run_rounds import events  # scripts/: the deployment log's round events
from treespec.bench_data import load_prompts
from treespec.bench_interleave import interleave
from common.host import cpu_model
from treespec.bench_suite import Suite

MAX_ROUND_MS = 400.0


class RoundLog:
    """A driver log keeping every ``round`` event with its wall time (epoch seconds)."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows

    def info(self, event: str, **kw) -> None:
        if event == "round":
            self.rows.append({"t": time.time(), **kw})

    def __getattr__(self, name):  # warning, debug, ...: dropped
        return lambda *args, **kwargs: None


def round_means(rows: list[dict]) -> dict:
    """Means per decode round (gap, draft, verify, other ms; committed tokens; nodes; grafts)."""
    keep = []
    for a, b in zip(rows, rows[1:]):
        gap = (b["t"] - a["t"]) * 1e3
        if gap < MAX_ROUND_MS and b["verify_ms"] < MAX_ROUND_MS:
            keep.append({"gap_ms": gap, "draft_ms": b["draft_ms"], "verify_ms": b["verify_ms"],
                         "committed": sum(b["accepted"]), "nodes": b["tree_nodes"], "grafts": b["lookup_grafts"]})
    if not keep:
        return {"rounds": 0}
    out = {k: statistics.mean(r[k] for r in keep) for k in keep[0]}
    out["other_ms"] = out["gap_ms"] - out["draft_ms"] - out["verify_ms"]
    return {"rounds": len(keep), **out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scheduler_log")
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--tree-size", default=None, help="as the deployment was started with (default: config)")
    ap.add_argument("--limit", type=int, default=8, help="HumanEval prompts (default 8)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--plain", action="store_true", help="both arms decode plainly (requests with speculation "
                    "off; a plain engine here): the verifier's own pass, without the draft or the tree policy")
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    since = time.time()
    prompts = load_prompts("humaneval", args.limit)
    suite = Suite(load_config(None, {"tree_size": args.tree_size}), prompts, args.max_new_tokens, 1)
    engine, rows = suite.engine((0, 0) if args.plain else suite.tree), []
    engine.driver.log = RoundLog(rows)
    got = interleave(args.url, engine, suite.tok, prompts, suite.ids, args.max_new_tokens, 1,
                     speculation=not args.plain)
    served = [e for e in events(Path(args.scheduler_log), "round") if e["t"] >= since]
    rounds = {"http": round_means(served), "local": round_means(rows)}
    for arm, r in rounds.items():
        print(arm, {k: round(v, 2) for k, v in r.items()})
    print({k: v for k, v in got.items() if k not in ("pairs", "per_pair_ratios")})
    with open(args.json, "w") as f:
        json.dump({"cpu_model": cpu_model(), "config": suite.describe(), "interleaved": got, "rounds": rounds}, f,
                  indent=1)


if __name__ == "__main__":
    main()
