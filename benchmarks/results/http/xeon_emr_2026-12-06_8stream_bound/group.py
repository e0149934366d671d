"""Prefill of B prompts of L tokens each: one pass per prompt (PREFILL_ALONE) vs one packed pass, interleaved."""
import sys, time, numpy as np, torch
from common.config import load_config
from common.modeling import runner
from common.modeling.build import main_model, draft_model
from common.host import cpu_model
which, B, L = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3].split(',')]
cfg = load_config()
model, _ = (main_model if which == "main" else draft_model)(cfg)
cache = model.new_cache(B, 2048)
print(cpu_model(), which, B, L)
E = np.zeros(0, np.int64)
def run(grouped):
    lens = [L[i % len(L)] for i in range(B)]
    ids = [list(np.random.randint(100, 20000, size=n)) for n in lens]
    for s in range(B): cache.lengths[s] = 0
    orig = runner.batches
    if grouped:
        runner.batches = lambda lengths: [[i for i, n in enumerate(lengths) if n <= runner.PREFILL_ALONE]] * any(n <= runner.PREFILL_ALONE for n in lengths) + [[i for i, n in enumerate(lengths) if n > runner.PREFILL_ALONE]]
    t = time.perf_counter()
    out = runner.forward_segments(model, cache, list(range(B)), ids, [E] * B, [E] * B)
    dt = time.perf_counter() - t
    runner.batches = orig
    return dt
run(False); run(True)
res = {False: [], True: []}
for r in range(4):
    for g in ((False, True) if r % 2 == 0 else (True, False)):
        res[g].append(run(g))
for g in (False, True):
    print("grouped" if g else "alone  ", [round(x, 2) for x in res[g]], "median", round(float(np.median(res[g])), 2))
