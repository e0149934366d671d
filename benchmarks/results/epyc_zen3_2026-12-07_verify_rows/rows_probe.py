"""ms of one bf16 main-model forward (+ LM head) over R chain rows after C cached tokens, by path:
native (one C++ call, exact attention) vs Python layer loop with SDPA; medians of 3 rounds x 8 reps, interleaved.

    PYTHONPATH=<tree> <tree>/.venv/bin/python rows_probe.py [C]
"""
import json
import statistics
import sys
import time

import torch

from common.config import load_config
from common.host import cpu_model
from common.modeling.build import load_pair

C = int(sys.argv[1]) if len(sys.argv) > 1 else 128
main, _, _ = load_pair(load_config(None, {}))
print("limits", main.exact_limits, "native", main.native is not None, cpu_model())
cache = main.new_cache(1, C + 64)
prompt = torch.randint(0, 1000, (1, C), generator=torch.Generator().manual_seed(0))
main.forward(prompt, torch.arange(C)[None], cache, [0], torch.ones(1, 1, C, C, dtype=torch.bool).tril())
cache.lengths[0] = C


def one(rows: int, limits) -> float:
    mask = torch.ones(1, 1, rows, C + rows, dtype=torch.bool)
    mask[0, 0, :, C:] = torch.ones(rows, rows, dtype=torch.bool).tril()
    saved, main.exact_limits = main.exact_limits, limits
    t = time.perf_counter()
    h = main.forward(torch.arange(7, 7 + rows)[None], (C + torch.arange(rows))[None], cache, [0], mask)
    main.logits(h[0])
    ms = (time.perf_counter() - t) * 1e3
    main.exact_limits = saved
    return ms


arms = {"native": None, "sdpa": ((64, 0),)}  # None: every pass by the kernel
res = {}
for _ in range(3):
    for rows in (1, 2, 3, 4, 5, 6, 8):
        for name, lim in arms.items():
            res.setdefault(f"{rows}/{name}", []).append(statistics.median(one(rows, lim) for _ in range(8)))
print(json.dumps({k: round(statistics.median(v), 1) for k, v in res.items()}, indent=0))
