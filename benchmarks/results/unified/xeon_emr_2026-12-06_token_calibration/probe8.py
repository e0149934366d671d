"""Instrumented in-process 8-stream waves: log the tree policy's prices each round."""
import sys, time, json
from dataclasses import replace
from common.config import load_config
from treespec.bench_data import load_prompts
from treespec.bench_suite import Suite
from treespec.bench_run import run_concurrent
from services.scheduler import tree_policy as tp
from services.scheduler.estimates import SIZES

LOG = open(sys.argv[1], 'w')
orig_choose, orig_obs = tp.TreePolicy.choose, tp.TreePolicy.observe_round

def choose(self, batch, backlog=0, remaining=float('inf'), fit=1.0):
    out = orig_choose(self, batch, backlog, remaining, fit)
    rec = {'r': self.rounds, 'b': batch, 'bl': backlog, 'rem': round(remaining, 1), 'fit': round(fit, 2), 'out': out,
           'ex': self.explore_shape, 'why': self.last_reason[:30]}
    if self.verify is not None and self.draft is not None and self.table.measured():
        plain_ms = self._priced_ms(batch, 0, 0)
        rec['plain'] = (round(plain_ms, 1), round(self.calibration.factor(batch, False), 3))
        rec['spec_f'] = round(self.calibration.factor(batch, True), 3)
        catch = self.draft.ms(backlog) if backlog > 0 else 0.0
        best = None
        for si, size in enumerate(SIZES):
            for depth in range(1, min(size, self.max_depth) + 1):
                exp = self.table.expected(si, depth)
                if exp is None: continue
                ms = self._priced_ms(batch, size, depth, exp)
                cu = catch / max(1.0, remaining / (exp + 1))
                rate = batch * (fit * exp + 1) / (ms + cu) * rec['spec_f']
                if best is None or rate > best[0]:
                    best = (rate, size, depth, exp, ms, cu, self.verify_ms(batch, batch * (size + 1)))
        pr = batch / plain_ms * rec['plain'][1]
        rec['tree'] = [round(x, 4) if isinstance(x, float) else x for x in best] if best else None
        rec['ratio'] = round(best[0] / pr, 3) if best else None
        rec['v1'] = round(self.verify_ms(batch, 2 * batch), 1)
    LOG.write(json.dumps(rec) + '\n'); LOG.flush()
    return out

def observe_round(self, speculative, tokens, draft_ms=0.0, grafted=False, appended=None):
    LOG.write(json.dumps({'obs': [speculative, tokens, round(draft_ms, 1), grafted, appended]}) + '\n')
    return orig_obs(self, speculative, tokens, draft_ms, grafted, appended)

tp.TreePolicy.choose, tp.TreePolicy.observe_round = choose, observe_round
cfg = replace(load_config(None), prefix_cache=False)
prompts = load_prompts('humaneval', 8)
suite = Suite(cfg, prompts, 128, 8, ignore_eos=True)
order = sys.argv[2].split(',') if len(sys.argv) > 2 else ['plain', 'spec', 'spec', 'plain']
res = []
for mode in order:
    eng = suite.engine((0, 0) if mode == 'plain' else None, slots=8)
    LOG.write(json.dumps({'wave': mode}) + '\n')
    r = run_concurrent(eng, suite.ids, 128, ignore_eos=True)
    print(mode, round(r['tokens_per_s'], 2), flush=True); res.append((mode, r['tokens_per_s']))
print(json.dumps(res))
