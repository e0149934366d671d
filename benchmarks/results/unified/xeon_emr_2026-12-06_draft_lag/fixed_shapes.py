"""In-process 8-stream waves with fixed shapes (8 HumanEval prompts, 128 tokens, prompt lookup and prefix cache off):
per wave the tokens/s and the median verify and draft ms of its batch-8 rounds. Does a verify pass cost more in a tree
wave? Usage: PYTHONPATH=. python fixed_shapes.py [0x0,1x1,...]"""
import sys, json, statistics as st
from dataclasses import replace
from common.config import load_config
from treespec.bench_data import load_prompts
from treespec.bench_suite import Suite
from treespec.bench_run import run_concurrent
from services.scheduler import planning
rec = []
orig = planning.Planner.observe_costs
def observe_costs(self, rnd, committed, nodes):
    rec.append((len(committed), nodes, rnd.draft_ms, rnd.verify_ms, sum(n for _, n in committed)))
    return orig(self, rnd, committed, nodes)
planning.Planner.observe_costs = observe_costs
cfg = replace(load_config(None), prefix_cache=False, prompt_lookup=False)
suite = Suite(cfg, load_prompts('humaneval', 8), 128, 8, ignore_eos=True)
ORDER = [(0, 0), (1, 1), (0, 0), (1, 1)] if len(sys.argv) < 2 else [tuple(map(int, s.split("x"))) for s in sys.argv[1].split(",")]
for tree in ORDER:
    rec.clear()
    eng = suite.engine(tree, slots=8)
    r = run_concurrent(eng, suite.ids, 128, ignore_eos=True)
    b8 = [x for x in rec if x[0] == 8 and x[3] < 1000]
    print(tree, f"{r['tokens_per_s']:.1f} tok/s", 'verify med', round(st.median(x[3] for x in b8)), 'draft med',
          round(st.median(x[2] for x in b8)), 'rounds', len(b8), 'tok/round', round(st.mean(x[4] for x in b8), 2), flush=True)
