"""Time and profile one main-model prefill of N tokens (bf16, this host)."""
import sys, time, numpy as np, torch
from common.config import load_config
from common.modeling.build import main_model, draft_model
from common.modeling.runner import forward_segments
N = int(sys.argv[1]) if len(sys.argv) > 1 else 750
which = sys.argv[2] if len(sys.argv) > 2 else "main"
cfg = load_config()
model, tok = (main_model if which == "main" else draft_model)(cfg)
cache = model.new_cache(2, 2048)
slot = 0
ids = list(np.random.randint(100, 20000, size=N))
def run():
    cache.lengths[slot] = 0
    t = time.perf_counter()
    forward_segments(model, cache, [slot], [ids], [np.zeros(0, np.int64)], [np.zeros(0, np.int64)])
    return time.perf_counter() - t
for _ in range(2): run()
ts = [run() for _ in range(3)]
print(which, N, "prefill s", [round(t, 3) for t in ts], f"{2*1.31e9*N/min(ts)/1e9:.0f} GFLOP/s(linear est)")
if "--prof" in sys.argv:
    from torch.profiler import profile
    with profile() as p: run()
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
