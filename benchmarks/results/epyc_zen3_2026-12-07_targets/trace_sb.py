"""In process, auto trees, Spec-Bench prompts in the bench's order: every round's shape, reason, tokens, ms.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/results/epyc_zen3_2026-12-07_targets/trace_sb.py [N] [DATASET LIMIT]

DATASET and LIMIT as ``treespec bench --dataset --limit`` (default: ``spec_bench`` 24, the first N traced).
"""
import json
import sys

from common.config import load_config
from scripts.batch_round_trace import RoundLog
from treespec.bench_data import load_prompts
from treespec.bench_run import run_one
from treespec.bench_suite import Suite

N = int(sys.argv[1]) if len(sys.argv) > 1 else 8
prompts = load_prompts(sys.argv[2], int(sys.argv[3])) if len(sys.argv) > 3 else load_prompts("spec_bench", 24)
suite = Suite(load_config(None, {}), prompts, 128, 1)
rows: list[dict] = []
eng = suite.engine(None, slots=1)
run_one(eng, "warm", suite.ids[0], 16, False)
eng.driver.log = RoundLog(eng, "auto", rows)
for i in range(N):
    first = len(rows)
    r = run_one(eng, f"p{i}", suite.ids[i], 128, False)
    print(f"== {i} {prompts[i].category} tokens {len(r.tokens)} s {r.seconds:.2f} ttft {r.ttft:.2f}")
    for x in rows[first:]:
        print("  ", x["shape"], "exp" if x["explore"] else "   ", sum(x["accepted"]), round(x["draft_ms"]),
              round(x["verify_ms"]), x.get("lookup_grafts", ""), (x["reason"] or "")[:150])
with open("trace_sb.json", "w") as f:
    json.dump(rows, f, default=str)
