"""Spec-Bench 24 through one in-process auto engine in the bench's order; for the categories named (argv[1],
comma list) plain runs alongside and every round is printed. argv[2]: JSON out."""
import json, sys, time
sys.path.insert(0, 'scripts')  # run from the repository root
from batch_round_trace import RoundLog
from common.config import load_config
from treespec.bench_data import load_prompts
from treespec.bench_run import run_one
from treespec.bench_suite import Suite
from common.host import cpu_model

cats = sys.argv[1].split(',')
prompts = load_prompts('spec_bench', 24)
suite = Suite(load_config(None, {}), prompts, 128, 1)
plain, auto = suite.engine((0, 0)), suite.engine(None)
rows = []
auto.driver.log = RoundLog(auto, 'auto', rows)
print(cpu_model())
out = []
for p, ids in zip(prompts, suite.ids):
    if p.category not in cats:
        run_one(auto, 's' + p.id, ids, 128, False); continue
    a = run_one(plain, 'p' + p.id, ids, 128, False)
    first = len(rows)
    b = run_one(auto, 's' + p.id, ids, 128, False)
    print(f"{p.id} {p.category} prompt {len(ids)} plain {a.seconds:.2f}s ttft {a.ttft:.2f} n {len(a.tokens)} | spec {b.seconds:.2f}s ttft {b.ttft:.2f} n {len(b.tokens)} ratio {a.seconds/b.seconds:.2f}")
    for r in rows[first:]:
        print(f"   shape {r['shape']} expl {r['explore']} d {r['draft_ms']:.0f} v {r['verify_ms']:.0f} acc {r['accepted']} nodes {r.get('tree_nodes')} lk {r.get('lookup_nodes')} guess {r.get('from_guess')}")
    out.append({'id': p.id, 'cat': p.category, 'plain': a.summary(), 'spec': b.summary(), 'rounds': rows[first:]})
json.dump(out, open(sys.argv[2], 'w'))
