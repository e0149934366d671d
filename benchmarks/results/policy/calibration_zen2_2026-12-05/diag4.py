"""Sequence of the auto policy's choices with reasons, per round."""
import sys, time
from common.config import load_config
from treespec.bench_data import load_prompts
from treespec.bench_suite import Suite
from treespec.bench_run import run_one
from services.scheduler import tree_policy
quant, limit = sys.argv[1], int(sys.argv[2])
cfg = load_config(None, {"main_quantization": quant})
suite = Suite(cfg, load_prompts("humaneval", limit), 128, 1)
log = []
orig = tree_policy.TreePolicy.choose
def choose(self, batch, *a, **k):
    r = orig(self, batch, *a, **k)
    log.append(f"{r} exp={self.explore_shape} backlog={a[0] if a else k.get('backlog')} rem={a[1] if len(a)>1 else k.get('remaining', 0):.0f} {self.last_reason}")
    return r
tree_policy.TreePolicy.choose = choose
orig_obs = tree_policy.TreePolicy.observe_round
def obs(self, *a, **k):
    log.append(f"   observe_round {a} {k} model={self.modelled}")
    return orig_obs(self, *a, **k)
tree_policy.TreePolicy.observe_round = obs
eng = suite.engine(None)
for i, ids in enumerate(suite.ids):
    log.append(f"=== prompt {i}")
    r = run_one(eng, f"a{i}", ids, 128, False)
    log.append(f"=== {len(r.tokens)} tokens {r.seconds:.2f}s ttft {r.ttft:.2f} committed {r.committed}")
print("\n".join(log))
