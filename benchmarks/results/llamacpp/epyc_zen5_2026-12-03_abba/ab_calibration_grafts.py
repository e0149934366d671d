"""The A/B behind ab_batch*_calibration_grafts_old_vs_new.json (kept with them as their provenance): plain, `auto` with
the pre-889e7f8 calibration (rounds with prompt-lookup grafts calibrate; patched into one engine), and `auto`, in one
process, groups of B prompts, EOS ignored, arms interleaved. Run from the repository root:
    PYTHONPATH=. .venv/bin/python benchmarks/results/llamacpp/epyc_zen5_2026-12-03_abba/ab_calibration_grafts.py humaneval 32 8 out.json
"""
import sys, json, types
sys.path.insert(0, 'scripts')
from common.config import load_config
from treespec.bench_data import load_prompts
from treespec.bench_run import run_one
from treespec.bench_suite import Suite
from services.scheduler.tree_policy import TreePolicy
import ab_tree_shapes as A
ds, n, B, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
arms = ["plain", "auto-old", "auto"]
suite = Suite(load_config(None, {}), load_prompts(ds, n), 128, 1)
engines = [suite._engine((0, 0), slots=B), suite._engine(None, slots=B), suite._engine(None, slots=B)]
pol = engines[1].driver.policy
pol.observe_round = types.MethodType(lambda self, s, t, m, d=0.0, grafted=False: TreePolicy.observe_round(self, s, t, m, d, False), pol)
for e in engines:
    run_one(e, "warm", suite.ids[0], 16, False)
tot = [[0, 0.0, 0] for _ in arms]
groups = [suite.ids[i:i + B] for i in range(0, len(suite.ids), B)]
for i, g in enumerate(groups):
    order = range(3) if i % 2 == 0 else reversed(range(3))
    for k in order:
        tok, secs, rounds = A.run_group(engines[k], g, 128, True)
        tot[k][0] += tok; tot[k][1] += secs; tot[k][2] += rounds
    print(i, " ".join(f"{a}: {t[0]/t[1]:.2f}" for a, t in zip(arms, tot)), flush=True)
for a, t in zip(arms, tot):
    print(f"{a}: {t[0]/t[1]:.2f} tok/s, {t[0]/t[2]:.2f} tokens/seq-round, vs plain {t[0]/t[1]/(tot[0][0]/tot[0][1]):.3f}")
json.dump({"cpu": A.cpu_model(), "batch": B, "prompts": n, "arms": {a: {"tokens": t[0], "seconds": t[1], "rounds": t[2]} for a, t in zip(arms, tot)}}, open(out, "w"), indent=1)
