"""Diagnostic: auto policy's choices vs fixed tree shapes, in process (bf16 or w4a8 main)."""
import json, sys, time
from collections import Counter
from common.config import load_config
from treespec.bench_data import load_prompts
from treespec.bench_suite import Suite
from treespec.bench_run import run_one
from services.scheduler import tree_policy

quant, limit, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
shapes = [tuple(map(int, s.split("x"))) for s in sys.argv[4].split(",")] if len(sys.argv) > 4 else []
cfg = load_config(None, {"main_quantization": quant})
suite = Suite(cfg, load_prompts("humaneval", limit), 128, 1)
print("verify curve", suite.costs[0].points, "\ndraft curve", suite.costs[1].points, flush=True)
choices = []
orig = tree_policy.TreePolicy.choose
def choose(self, batch, *a, **k):
    r = orig(self, batch, *a, **k)
    choices.append((r, self.explore_shape, self.last_reason[:20]))
    return r
tree_policy.TreePolicy.choose = choose
res = {}
def arm(name, tree):
    eng = suite.engine(tree)
    t0 = len(eng.stats.committed)
    runs = [run_one(eng, f"{name}{i}", ids, 128, False) for i, ids in enumerate(suite.ids)]
    st = eng.stats
    n = sum(len(r.tokens) for r in runs); s = sum(r.seconds for r in runs)
    dec = sum(len(r.tokens) - 1 for r in runs) / sum(r.seconds - r.ttft for r in runs)
    rounds = [c for r in runs for c in r.committed]
    row = {"tps": n / s, "decode_tps": dec, "mal": sum(rounds) / max(1, len(rounds)), "rounds": len(rounds),
           "draft_ms_mean": sum(st.draft_ms) / max(1, len(st.draft_ms)), "verify_ms_mean": sum(st.verify_ms) / max(1, len(st.verify_ms))}
    res[name] = row
    print(name, json.dumps(row), flush=True)
    return eng
arm("plain", (0, 0))
choices.clear()
eng = arm("auto", None)
c = Counter((x[0], x[1], x[2]) for x in choices)
print("auto choices", c.most_common(20))
t = eng.policy.table
from services.scheduler.estimates import SIZES
for si, size in enumerate(SIZES):
    print(size, [None if t.expected(si, d) is None else round(t.expected(si, d), 2) for d in range(1, t.max_depth + 1)])
res["auto_choices"] = [[list(k[0]), k[1], k[2], v] for k, v in c.items()]
for sh in shapes:
    arm(f"fixed_{sh[0]}x{sh[1]}", sh)
json.dump(res, open(out, "w"), indent=1)
