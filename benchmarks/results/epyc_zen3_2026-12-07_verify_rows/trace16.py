"""In process, auto trees only, the 16 Spec-Bench prompts of the A/B (MT-Bench, translation, QA, math; bench order):
every round's shape, explore flag, accepted tokens, draft and verify ms and the policy's reason.

    PYTHONPATH=<tree> <tree>/.venv/bin/python trace16.py OUT.log
"""
import json
import sys

from common.config import load_config
from scripts.batch_round_trace import RoundLog
from treespec.bench_data import load_prompts
from treespec.bench_run import run_one
from treespec.bench_suite import Suite

out = open(sys.argv[1], "w")
prompts = load_prompts("spec_bench:mt_bench,translation,qa,math_reasoning", 16)
suite = Suite(load_config(None, {}), prompts, 128, 1)
rows: list[dict] = []
eng = suite.engine(None, slots=1)
run_one(eng, "warm", suite.ids[0], 16, False)
eng.driver.log = RoundLog(eng, "auto", rows)
for i in range(len(prompts)):
    first = len(rows)
    r = run_one(eng, f"p{i}", suite.ids[i], 128, False)
    print(f"== {i} {prompts[i].category} tokens {len(r.tokens)} s {r.seconds:.2f} ttft {r.ttft:.2f}", file=out)
    for x in rows[first:]:
        print("  ", x["shape"], "exp" if x["explore"] else "   ", sum(x["accepted"]), round(x["draft_ms"]),
              round(x["verify_ms"]), x.get("lookup_grafts", ""), (x["reason"] or "")[:150], file=out)
    out.flush()
