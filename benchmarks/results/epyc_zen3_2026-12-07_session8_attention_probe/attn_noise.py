"""How noisy is the attention probe's whole-pass comparison, and what does attention alone cost?

For R rows after C cached columns of the bf16 main (random KV): one whole forward by
  native  (exact attention, one C++ layer loop: what the probe's "exact" arm times)
  pyexact (exact attention, Python layer loop: model.native = None)
  sdpa    (SDPA, Python layer loop: what the probe's "sdpa" arm times)
and attention alone, every layer's call (28), by ExactAttention and by tree_attention (SDPA).
Arms interleaved, REPS rounds; prints min / median / max per arm.

    PYTHONPATH=<tree> <tree>/.venv/bin/python attn_noise.py [REPS]
"""
import json
import statistics
import sys
import time

import torch

from common.config import load_config
from common.host import cpu_model
from common.modeling.attention import ExactAttention, tree_attention
from common.modeling.build import load_pair

REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 8
main, _, _ = load_pair(load_config(None, {}), with_draft=False)
print("cpu", cpu_model(), "limits", main.exact_limits, "native", main.native is not None, flush=True)
S = main.spec
cache = main.new_cache(1, 4096 + 64)
slot = cache.allocate()
cache.k.normal_()
cache.v.normal_()
native = main.native


def mask_for(rows, cols):
    m = torch.ones(1, 1, rows, cols + rows, dtype=torch.bool)
    m[0, 0, :, cols:] = torch.ones(rows, rows, dtype=torch.bool).tril()
    return m


def whole(rows, cols, arm):
    mask = mask_for(rows, cols)
    tokens = torch.randint(0, 1000, (1, rows))
    pos = torch.arange(cols, cols + rows)[None]

    def run():
        cache.lengths[slot] = cols
        saved = main.exact_limits
        main.exact_limits = ((64, 0),) if arm == "sdpa" else None
        main.native = None if arm == "pyexact" else native
        t = time.perf_counter()
        main.forward(tokens, pos, cache, [slot], mask)
        ms = (time.perf_counter() - t) * 1e3
        main.exact_limits, main.native = saved, native
        return ms
    return run


def alone(rows, cols, arm):
    mask = mask_for(rows, cols)
    q = torch.randn(1, rows, S.num_heads, S.head_dim, dtype=torch.bfloat16)

    def run():
        cache.lengths[slot] = cols
        t = time.perf_counter()
        fn = ExactAttention(main.exact_lib, mask, [slot], cache.max_len) if arm == "exact" else tree_attention
        for layer in range(S.num_layers):
            fn(q, cache, layer, [slot], mask)
        return (time.perf_counter() - t) * 1e3
    return run


res = {}
with torch.inference_mode():
    for rows in (4, 8, 16):
        for cols in (512, 2048):
            runs = {f"{rows}/{cols}/whole/{a}": whole(rows, cols, a) for a in ("native", "pyexact", "sdpa")}
            runs |= {f"{rows}/{cols}/alone/{a}": alone(rows, cols, a) for a in ("exact", "sdpa")}
            for r in runs.values():
                r()  # warm-up
            for _ in range(REPS):
                for k, r in runs.items():
                    res.setdefault(k, []).append(r())
            for k in runs:
                v = res[k]
                print(k, "min %.1f med %.1f max %.1f" % (min(v), statistics.median(v), max(v)), flush=True)
print(json.dumps({k: [round(x, 2) for x in v] for k, v in res.items()}))
