"""Where a deployment's round time goes outside the workers' own steps, from the scheduler's log.

Start the deployment with ``--set log_level=debug``: the scheduler then logs ``step sent`` and
``step result`` (``services/scheduler/loop.py``) for every draft and verify step. For each step
this prints, in ms (median and mean over the decode rounds):

* **messages**: from the scheduler sending a step to handling its result, minus the worker's own
  step time (``draft_ms`` / ``verify_ms`` in the result): two messages over the control plane
  (each through the sender's and the receiver's I/O threads) plus the worker's decode/encode;
* **scheduler**: from handling a result to sending the next step (after a draft result: the
  verify step; after a verify result: commit, deltas to the gateway, and the next round's plan).

Steps longer than ``--max-ms`` (prefill) are left out. Example (a fresh deployment, 4 prompts):

    .venv/bin/treespec up --tree-size 8 --set log_level=debug --set log_dir=/tmp/ts &
    .venv/bin/treespec bench --url http://127.0.0.1:8000 --limit 4 --json /tmp/b.json
    PYTHONPATH=$PWD:$PWD/scripts .venv/bin/python scripts/message_hops.py /tmp/ts/scheduler-0.log
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from http_run_rounds import events  # scripts/: a log's events with their wall time
from treespec.bench import write_json
from common.host import cpu_model

NEXT = {"DraftResult": "VerifyStep", "VerifyResult": "DraftStep"}  # what a result leads to
STEP_OF = {"DraftResult": "DraftStep", "VerifyResult": "VerifyStep"}  # the step a result answers


def hop_times(sent: list[dict], results: list[dict], max_ms: float) -> dict[str, list[float]]:
    """{"messages DraftStep": [...], "scheduler after DraftResult": [...], ...} in ms, from the
    scheduler's ``step sent`` / ``step result`` events (each with ``t`` in epoch seconds)."""
    out: dict[str, list[float]] = {}
    by_key = {(e["step"], e["round"], e["worker"]): e for e in sent}
    for r in results:
        s = by_key.get((STEP_OF[r["step"]], r["round"], r["worker"]))
        if s is not None and r["worker_ms"] <= max_ms:
            out.setdefault(f"messages {s['step']}", []).append((r["t"] - s["t"]) * 1e3 - r["worker_ms"])
    timeline = sorted(sent + results, key=lambda e: e["t"])
    for a, b in zip(timeline, timeline[1:]):
        if a["event"] == "step result" and b["event"] == "step sent" and b["step"] == NEXT[a["step"]] \
                and a["worker_ms"] <= max_ms:
            out.setdefault(f"scheduler after {a['step']}", []).append((b["t"] - a["t"]) * 1e3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scheduler_log", type=Path)
    ap.add_argument("--max-ms", type=float, default=400.0, help="leave out steps longer than this (prefill)")
    ap.add_argument("--json", help="also write the summary here")
    args = ap.parse_args()
    sent, results = events(args.scheduler_log, "step sent"), events(args.scheduler_log, "step result")
    if not sent:
        raise SystemExit(f"{args.scheduler_log}: no 'step sent' events (start the deployment with "
                         "--set log_level=debug)")
    summary = {k: {"n": len(v), "median_ms": round(statistics.median(v), 3), "mean_ms": round(statistics.mean(v), 3)}
               for k, v in sorted(hop_times(sent, results, args.max_ms).items())}
    for k, v in summary.items():
        print(f"{k:28s} n={v['n']:4d}  median {v['median_ms']:7.2f} ms  mean {v['mean_ms']:7.2f} ms")
    if args.json:
        write_json(args.json, {"cpu_model": cpu_model(), "log": str(args.scheduler_log), "hops": summary})


if __name__ == "__main__":
    main()
