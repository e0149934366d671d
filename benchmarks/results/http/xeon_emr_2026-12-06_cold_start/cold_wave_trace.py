"""Cold auto engine at a batch of 8 (HumanEval, 128 tokens, EOS ignored): every round with the policy's reason."""
import sys, time, json
sys.path.insert(0, 'scripts')  # run from the repository root
from batch_round_trace import RoundLog, summarize
from common.config import load_config
from treespec.bench_data import load_prompts
from treespec.bench_run import run_concurrent, run_one
from treespec.bench_suite import Suite
from common.host import cpu_model

class RL(RoundLog):
    def info(self, event, **kw):
        if event == "round":
            p = self.engine.driver.planner.policy
            self.rows.append({"shape": list(self.engine.driver.planner.shape), "explore": p.explore_shape,
                              "reason": p.last_reason, **kw})
groups = int(sys.argv[1])
suite = Suite(load_config(None, {}), load_prompts("humaneval", 8 * groups), 128, 1)
print(cpu_model())
rows = []
plain, auto = suite.engine((0, 0), slots=8), suite.engine(None, slots=8)
run_one(plain, "warm", suite.ids[0], 16, False); run_one(auto, "warm", suite.ids[0], 16, False)
auto.driver.log = RL(auto, 'auto', rows)
for g in range(groups):
    ids = suite.ids[g * 8:(g + 1) * 8]
    for arm, eng in (("plain", plain), ("auto", auto)):
        first = len(rows)
        r = run_concurrent(eng, ids, 128, ignore_eos=True)
        print(f"group {g} {arm}: {r['tokens'] / r['seconds']:.2f} tok/s")
        if arm == "auto":
            for x in rows[first:]:
                print(f"  b{x['batch']} {x['shape']} ex {x['explore']} d {x['draft_ms']:.0f} v {x['verify_ms']:.0f} tok {sum(x['accepted'])} nodes {x['tree_nodes']} lk {sum(x['lookup_nodes'])} | {x['reason'][:100]}")
