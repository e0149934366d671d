"""The in-process engine on N HumanEval prompts with the scheduler's structured log (round, tree shape events) in LOG.

Usage, from a checkout's root: PYTHONPATH=. .venv/bin/python diag.py MAIN_QUANT LOG N
"""
import sys, time
from dataclasses import replace
from common.logging import setup_logging
from common.config import Config
from common import wire
from treespec.engine import build_local_engine
from treespec.bench_data import load_prompts
from treespec.generate import encode_prompt
out = open(sys.argv[2], "w")
log = setup_logging("scheduler", level="info", stream=out)
cfg = replace(Config(), main_quantization=sys.argv[1])
from common.modeling.build import load_pair
from treespec.engine import make_engine
import treespec.engine as te
from services.scheduler.local import LocalEngine
orig = LocalEngine.__init__
def init(self, *a, **k):
    k["log"] = log
    orig(self, *a, **k)
LocalEngine.__init__ = init
from services.scheduler.tree_policy import TreePolicy
orig_ln = TreePolicy.lookup_nodes
def ln(self, batch, size, depth, seq, value=1.0):
    r = orig_ln(self, batch, size, depth, seq, value)
    if r:
        st = seq.stats
        log.info("lookup decision", nodes=r, batch=batch, size=size, rounds=seq.rounds, own=[round(st.added, 2), round(st.gained, 2), round(st.weight, 2)],
                 prior=[round(self.lookup.added, 2), round(self.lookup.gained, 2), round(self.lookup.weight, 2)],
                 v=[round(self.verify_ms(batch, k), 1) for k in (1, 2, 3, 5, 9)], loses=seq.rates.loses(batch))
    return r
TreePolicy.lookup_nodes = ln
eng, tok = build_local_engine(cfg, slots=4)
prompts = load_prompts("humaneval", int(sys.argv[3]))
for i, p in enumerate(prompts):
    ids = encode_prompt(tok, p.text, p.chat)
    t0 = time.perf_counter()
    n = sum(len(d.tokens) for d in eng.generate(f"p{i}", ids, wire.SamplingParams(max_tokens=128)))
    print(i, n, round(time.perf_counter() - t0, 2), file=sys.stderr)
