"""Seconds of one bf16 main-model prefill of P random tokens (the path `treespec bench` takes for a prompt: one
forward, SDPA, Python layer loop; the exact-attention kernel is not called for segments over 32 rows), 3 times.
    PYTHONPATH=<tree> <tree>/.venv/bin/python prefill_probe.py [P]"""
import sys
import time

import torch

from common.config import load_config
from common.host import cpu_model
from common.modeling.build import load_pair

P = int(sys.argv[1]) if len(sys.argv) > 1 else 700
main, _, _ = load_pair(load_config(None, {}))
cache = main.new_cache(1, P + 8)
prompt = torch.randint(0, 1000, (1, P), generator=torch.Generator().manual_seed(0))
times = []
for _ in range(3):
    t = time.perf_counter()
    main.forward(prompt, torch.arange(P)[None], cache, [0], torch.ones(1, 1, P, P, dtype=torch.bool).tril())
    times.append(time.perf_counter() - t)
print(cpu_model(), "prefill", P, "s", [round(x, 2) for x in times])
