"""ms of one draft (0.5B, W4A8) forward of R chain rows + its LM head after 256 cached tokens (native path), medians of 15.
    PYTHONPATH=$PWD .venv/bin/python benchmarks/results/kernels/avx2_six_row_blocks_zen3_2026-12-07/draft_probe.py 1 2 4 8"""
import statistics, sys, time, torch
from common.config import load_config
from common.modeling.build import load_pair
C = 256
_, draft, _ = load_pair(load_config(None, {}))
cache = draft.new_cache(1, C + 64)
prompt = torch.randint(0, 1000, (1, C), generator=torch.Generator().manual_seed(0))
draft.forward(prompt, torch.arange(C)[None], cache, [0], torch.ones(1, 1, C, C, dtype=torch.bool).tril())
cache.lengths[0] = C
for rows in [int(r) for r in (sys.argv[1:] or "1 2 4 8".split())]:
    mask = torch.ones(1, 1, rows, C + rows, dtype=torch.bool)
    mask[0, 0, :, C:] = torch.ones(rows, rows, dtype=torch.bool).tril()
    f, l = [], []
    for _ in range(15):
        t = time.perf_counter()
        h = draft.forward(torch.arange(7, 7 + rows)[None], (C + torch.arange(rows))[None], cache, [0], mask)
        t1 = time.perf_counter()
        draft.logits(h[0])
        t2 = time.perf_counter()
        f.append((t1 - t) * 1e3); l.append((t2 - t1) * 1e3)
    print(f"rows {rows:2d}: forward {statistics.median(f):6.2f} ms  lm head {statistics.median(l):6.2f} ms", flush=True)
