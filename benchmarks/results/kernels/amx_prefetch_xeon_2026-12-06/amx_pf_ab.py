"""A/B: the packed bf16 kernel's AMX path with and without software prefetch, weights streamed from
DRAM (the AMX probe's shapes copied to span 2x the L3). Libraries interleaved per rep; min ms."""
import sys, time, json
import torch
from common.modeling import amx, native
torch.set_num_threads(2)
names = sys.argv[1].split(","); rows_list = [int(r) for r in sys.argv[2].split(",")]; reps = int(sys.argv[3])
libs = {n: native.load(__import__("pathlib").Path(f"/work/s52/libs/{n}.so")) for n in names}
gen = torch.Generator().manual_seed(0)
first = libs[names[0]]
base = [amx._random_weight(first, "bf16", n, k, gen) for n, k in amx.PROBE_SHAPES]
copies = amx.probe_copies(sum(w.nbytes for w in base), amx.last_level_cache_bytes())
ws = base + [amx._copy(w) for _ in range(copies - 1) for w in base]
total = sum(w.nbytes for w in ws)
res = {n: {r: [] for r in rows_list} for n in names}
for rep in range(reps):
    for r in rows_list:
        xs = [torch.randn(r, w.k, generator=gen).bfloat16() for w in base] * copies
        for n in (names if rep % 2 == 0 else names[::-1]):
            lib = libs[n]; lib.bf16_amx_rows = 2
            wl = [native.PackedWeight(lib, w.data, w.scales, w.n, w.k, w.kind) for w in ws]
            for w, x in zip(wl[:2], xs[:2]): w.linear(x)
            t = time.perf_counter()
            for w, x in zip(wl, xs): w.linear(x)
            res[n][r].append((time.perf_counter() - t) * 1e3)
print("weights MB", round(total / 1e6))
for n in names:
    print(n, " ".join(f"{r}:{min(v):.1f}ms/{total/min(v)/1e6:.1f}GB/s" for r, v in res[n].items()))
