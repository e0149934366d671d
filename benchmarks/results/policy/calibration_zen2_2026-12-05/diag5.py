"""After an auto run: the policy's modelled rate per (size, depth) cell vs plain."""
import sys
from common.config import load_config
from treespec.bench_data import load_prompts
from treespec.bench_suite import Suite
from treespec.bench_run import run_one
from services.scheduler.estimates import SIZES
quant, limit = sys.argv[1], int(sys.argv[2])
cfg = load_config(None, {"main_quantization": quant})
suite = Suite(cfg, load_prompts("humaneval", limit), 128, 1)
eng = suite.engine(None)
tot = 0.0; toks = 0; dec = 0.0
for i, ids in enumerate(suite.ids):
    r = run_one(eng, f"a{i}", ids, 128, False)
    tot += r.seconds; toks += len(r.tokens); dec += r.seconds - r.ttft
    print(i, len(r.tokens), f"{r.seconds:.2f}", r.committed, flush=True)
print(f"auto tps {toks/tot:.2f} decode {(toks-len(suite.ids))/dec:.2f}")
p = eng.policy
print("plain ms", round(p.verify_ms(1, 1), 1), "factor spec/plain", round(p.calibration.factor(1, True), 2), round(p.calibration.factor(1, False), 2))
print("verify corr", {k: round(v, 2) for k, v in getattr(p.verify_cost, "__dict__", {}).items() if not isinstance(v, dict)} )
for si, size in enumerate(SIZES):
    for depth in range(1, min(size, p.max_depth) + 1):
        exp = p.table.expected(si, depth)
        if exp is None or depth not in (1, 2, 3, 4, 6, 8, 12) or size > 16:
            continue
        v = p.verify_ms(1, size + 1); d = p._draft_ms(1, size, depth, exp)
        print(f"({size:2d},{depth:2d}) exp {exp:.2f} verify {v:6.1f} draft {d:6.1f} (curve {p._draft_curve_ms(1, size, depth, exp):6.1f}) rate/plain {(exp + 1) / (v + d) * p.verify_ms(1, 1):.2f}")
