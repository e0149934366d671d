"""ms of the exact attention of a causal prefill (P rows after C cached columns, one slot) over all 28 layers of
the 1.5B main's shape, libraries interleaved; medians of 3. Usage: attn_prefill.py A.so,B.so"""
import math, statistics, sys, time, torch
from common.modeling.native import load
torch.set_num_threads(2)
libs = [load(p) for p in sys.argv[1].split(",")]
layers, H, KVH, D = 28, 12, 2, 128
for C, P in ((0, 512), (0, 1536), (1024, 512)):
    L = C + P
    k = (torch.randn(layers, 1, L, KVH, D) * 0.5).bfloat16(); v = torch.randn(layers, 1, L, KVH, D).bfloat16()
    q = torch.randn(P, H, D).bfloat16()
    cols = torch.cat([torch.arange(C + r + 1) for r in range(P)]).to(torch.int32)
    offs = torch.zeros(P + 1, dtype=torch.int64); offs[1:] = torch.arange(C + 1, C + P + 1).cumsum(0)
    slot = torch.zeros(P, dtype=torch.int64)
    t, outs = {i: [] for i in range(len(libs))}, []
    for rep in range(3):
        for i, lib in enumerate(libs):
            o = torch.empty_like(q); s = time.perf_counter()
            for l in range(layers):
                lib.exact_attention_bf16(q.data_ptr(), k[l].data_ptr(), v[l].data_ptr(), o.data_ptr(), slot.data_ptr(),
                                         offs.data_ptr(), cols.data_ptr(), P, H, KVH, D, L, 1 / math.sqrt(D), 2)
            t[i].append(time.perf_counter() - s)
            if rep == 0: outs.append(o)
    print(f"prefill {P} rows after {C}: " + "  ".join(f"{statistics.median(x)*1e3:8.1f} ms" for x in t.values())
          + f"  x{statistics.median(t[0])/statistics.median(t[len(libs)-1]):.2f}  identical {all(torch.equal(outs[0], o) for o in outs)}", flush=True)
