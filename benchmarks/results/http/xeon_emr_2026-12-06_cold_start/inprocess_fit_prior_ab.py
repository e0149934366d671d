"""A/B in one process: plain vs auto (new DraftFit) vs auto (old DraftFit prior of 2 tokens), groups of 8 HumanEval prompts."""
import sys, time, json
from common.config import load_config
from treespec.bench_data import load_prompts
from treespec.bench_run import run_concurrent, run_one
from treespec.bench_suite import Suite
from common.host import cpu_model
from services.scheduler import makespan

NEW = makespan.DraftFit.ratio
def old_ratio(self):
    return (self.own + 2.0) / (self.batch + 2.0)

groups = int(sys.argv[1]); start = int(sys.argv[2]) if len(sys.argv) > 2 else 0
suite = Suite(load_config(None, {}), load_prompts("humaneval", 8 * (groups + start)), 128, 1)
print(cpu_model(), flush=True)
engines = {"plain": suite.engine((0, 0), slots=8), "new": suite.engine(None, slots=8), "old": suite.engine(None, slots=8)}
for e in engines.values():
    run_one(e, "warm", suite.ids[0], 16, False)
out = []
for g in range(start, start + groups):
    ids = suite.ids[g * 8:(g + 1) * 8]
    order = ["plain", "new", "old"] if g % 2 == 0 else ["plain", "old", "new"]
    res = {}
    for arm in order:
        makespan.DraftFit.ratio = old_ratio if arm == "old" else NEW
        e = engines[arm]; r0 = len(e.stats.committed)
        r = run_concurrent(e, ids, 128, ignore_eos=True)
        res[arm] = {"tok_s": r["tokens"] / r["seconds"], "seconds": r["seconds"], "rounds": len(e.stats.committed) - r0}
    line = " ".join(f"{a} {v['tok_s']:.2f} tok/s {v['rounds']} rounds" for a, v in res.items())
    print(f"group {g}: {line} | new/plain {res['new']['tok_s']/res['plain']['tok_s']:.3f} old/plain {res['old']['tok_s']/res['plain']['tok_s']:.3f}", flush=True)
    out.append({"group": g, **res})
json.dump({"cpu": cpu_model(), "groups": out}, open(sys.argv[3] if len(sys.argv) > 3 else "/work/s54/ab_fit.json", "w"), indent=1)
