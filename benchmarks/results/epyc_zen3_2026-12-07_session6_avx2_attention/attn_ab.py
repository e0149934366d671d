"""A/B of exact-attention kernels (.so files built from different sources) in one process: ms of the attention of
one pass over all layers of a model shape (28 layers x 12 query / 2 KV heads x 128 dims: Qwen2.5-1.5B main; 24 x 14 / 2
x 64: the 0.5B draft), R chain rows after C cached columns, the libraries interleaved rep by rep; medians of 9.
    PYTHONPATH=<tree> .venv/bin/python attn_ab.py OLD.so,NEW.so
Outputs of the libraries are compared (max abs difference printed) and each library's row 0 inside the R-row pass
must equal, bit for bit, the same row computed alone."""
import math, statistics, sys, time, torch
from common.modeling.native import load
torch.set_num_threads(2)
libs = [load(p) for p in sys.argv[1].split(",")]
shapes = {"main": (28, 12, 2, 128), "draft": (24, 14, 2, 64)}
for name, (layers, H, KVH, D) in shapes.items():
    for C in (256, 512, 1024, 2048, 4096):
        L = C + 32
        k = (torch.randn(layers, 1, L, KVH, D) * 0.5).bfloat16(); v = torch.randn(layers, 1, L, KVH, D).bfloat16()
        for R in (1, 4, 8):
            q = torch.randn(R, H, D).bfloat16()
            cols = torch.cat([torch.arange(C + r + 1) for r in range(R)]).to(torch.int32)  # row r: the C cached columns and its r + 1 chain rows
            offs = torch.tensor([0] + [sum(C + i + 1 for i in range(r + 1)) for r in range(R)], dtype=torch.int64)
            slot = torch.zeros(R, dtype=torch.int64)
            outs, t = [], {i: [] for i in range(len(libs))}
            for rep in range(9):
                for i, lib in enumerate(libs):
                    o = torch.empty_like(q)
                    s = time.perf_counter()
                    for l in range(layers):
                        lib.exact_attention_bf16(q.data_ptr(), k[l].data_ptr(), v[l].data_ptr(), o.data_ptr(), slot.data_ptr(),
                                                 offs.data_ptr(), cols.data_ptr(), R, H, KVH, D, L, 1 / math.sqrt(D), 2)
                    t[i].append(time.perf_counter() - s)
                    if rep == 0:
                        outs.append(o)
                        a = torch.empty_like(q[:1])
                        lib.exact_attention_bf16(q[:1].contiguous().data_ptr(), k[layers - 1].data_ptr(), v[layers - 1].data_ptr(), a.data_ptr(),
                                                 slot.data_ptr(), offs[:2].contiguous().data_ptr(), cols.data_ptr(), 1, H, KVH, D, L, 1 / math.sqrt(D), 2)
                        assert torch.equal(a[0], o[0]), "row alone differs"
            diff = (outs[0].float() - outs[-1].float()).abs().max().item()
            print(f"{name:5s} cols {C:5d} rows {R}: " + "  ".join(f"{statistics.median(x)*1e3:7.2f} ms" for x in t.values())
                  + f"  x{statistics.median(t[0])/statistics.median(t[len(libs)-1]):.2f}  maxdiff {diff:.3g}", flush=True)
