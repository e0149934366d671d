"""In process, auto trees, Spec-Bench prompts in the bench's order: every round's shape, reason, tokens, ms."""
import json, sys, time
from common.config import load_config
from treespec.bench_data import load_prompts
from treespec.bench_run import run_one
from treespec.bench_suite import Suite

N = int(sys.argv[1]) if len(sys.argv) > 1 else 8
prompts = load_prompts("spec_bench", 24)
suite = Suite(load_config(None, {}), prompts, 128, 1)
rows = []
class RoundLog:
    def __init__(self, engine): self.engine = engine
    def info(self, event, **kw):
        if event == "round":
            pl = self.engine.driver.planner
            rows.append({"shape": list(pl.shape), "explore": pl.policy.explore_shape, "reason": pl.policy.last_reason, **kw})
    def __getattr__(self, name): return lambda *a, **k: None
eng = suite.engine(None, slots=1)
run_one(eng, "warm", suite.ids[0], 16, False)
eng.driver.log = RoundLog(eng)
for i in range(N):
    first = len(rows)
    r = run_one(eng, f"p{i}", suite.ids[i], 128, False)
    cat = prompts[i].category if hasattr(prompts[i], "category") else "?"
    print(f"== {i} {cat} tokens {len(r.tokens)} s {r.seconds:.2f} ttft {r.ttft:.2f}")
    for x in rows[first:]:
        print("  ", x["shape"], "exp" if x["explore"] else "   ", sum(x.get("accepted", [0])), round(x.get("draft_ms", 0)), round(x.get("verify_ms", 0)),
              x.get("lookup_grafts", ""), (x["reason"] or "")[:150])
json.dump(rows, open("trace_sb.json", "w"), default=str)
