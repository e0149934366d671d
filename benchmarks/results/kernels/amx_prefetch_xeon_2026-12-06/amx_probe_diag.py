"""Diagnostic: the AMX crossover probe's raw times with its small weights (L3-resident) and with
weights that span 2x the last-level cache (streamed from DRAM, as a model pass is)."""
import dataclasses, json, sys, time
import torch
from common.modeling import amx
from common.modeling.native import library

torch.set_num_threads(2)
lib = library()
gen = torch.Generator().manual_seed(0)
llc = 307200 * 1024
for kind in ("bf16", "w4a8"):
    base = [amx._random_weight(lib, kind, n, k, gen) for n, k in amx.PROBE_SHAPES]
    pair = sum(w.nbytes for w in base)
    copies = max(1, -(-2 * llc // pair))
    t = time.perf_counter()
    many = base + [dataclasses.replace(w, data=w.data.clone()) for _ in range(copies - 1) for w in base]
    print(kind, "pair MB", pair / 1e6, "copies", copies, "clone s", round(time.perf_counter() - t, 2))
    attr = f"{kind}_amx_rows"
    for label, ws in (("small", base), ("stream", many)):
        times = {}
        t = time.perf_counter()
        for rows in amx.PROBE_ROWS:
            xs = [torch.randn(rows, w.k, generator=gen).bfloat16() for w in ws]
            times[rows] = tuple(round(amx._best_ms(lib, attr, ws, xs, a), 2) for a in (False, True))
        print(kind, label, "probe s", round(time.perf_counter() - t, 2), "choose", amx.choose_amx_rows(times), json.dumps(times))
        # 1-row reference (AVX-512 path) for bandwidth
        x1 = [torch.randn(1, w.k, generator=gen).bfloat16() for w in ws]
        ms = amx._best_ms(lib, attr, ws, x1, False)
        print(kind, label, "1 row ms", round(ms, 2), "GB/s", round(sum(w.nbytes for w in ws) / ms / 1e6, 1))
