"""Where a long prompt's prefill time goes (main model, bf16, in process): projections vs attention vs rest,
and whether splitting the prompt into chunks (successive passes over the cache) is faster."""
import sys, time, json
import numpy as np, torch
import common.modeling.model as M
import common.modeling.attention as A
from common.config import load_config
from common.modeling.runner import forward_segments
from treespec.engine import load_pair

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1536
CHUNKS = [int(c) for c in (sys.argv[2] if len(sys.argv) > 2 else "0,512,256,128").split(",")]
REPS = int(sys.argv[3]) if len(sys.argv) > 3 else 2
model, _, _ = load_pair(load_config(None, {}), with_draft=False)
cache = model.new_cache(1, N + 64)
slot = cache.allocate()
prompt = [int(t) for t in torch.randint(100, 20000, (N,))]
none = np.zeros(0, np.int64), np.zeros(0, np.int32)
acc = {"linear": 0.0, "attn": 0.0}
lin0, att0 = M.linear, A.tree_attention
def lin(*a, **k):
    t = time.perf_counter(); r = lin0(*a, **k); acc["linear"] += time.perf_counter() - t; return r
def att(*a, **k):
    t = time.perf_counter(); r = att0(*a, **k); acc["attn"] += time.perf_counter() - t; return r
M.linear, A.tree_attention = lin, att

def prefill(chunk):
    cache.free(slot); s = cache.allocate()
    acc["linear"] = acc["attn"] = 0.0
    step = chunk or N
    t0 = time.perf_counter()
    for i in range(0, N, step):
        part = prompt[i:i + step]
        hidden = forward_segments(model, cache, [s], [part], [none[0]], [none[1]])
        cache.commit(s, list(range(i, i + len(part))))
    model.logits(hidden[0][-1:])
    return time.perf_counter() - t0

prefill(128)  # warm
res = {c: [] for c in CHUNKS}
for r in range(REPS):
    for c in (CHUNKS if r % 2 == 0 else CHUNKS[::-1]):
        t = prefill(c)
        res[c].append((t, acc["linear"], acc["attn"]))
        print(f"chunk {c or N:5d}: {t:6.2f} s  linear {acc['linear']:6.2f}  attention {acc['attn']:5.2f}  rest {t-acc['linear']-acc['attn']:5.2f}  ({N/t:.1f} tok/s)", flush=True)
