"""A/B of packed-GEMM libraries (.so files built from different sources) in one process: ms of one Qwen2.5-1.5B
pass's projections (28 layers x 7, random bf16 weights) by rows, the libraries interleaved rep by rep; medians of 7.
    PYTHONPATH=<tree> .venv/bin/python gemm_ab.py OLD.so,NEW.so [rows...]
The outputs must be bit-identical across libraries (asserted)."""
import statistics, sys, time, torch
from common.modeling.native import load
torch.set_num_threads(2)
libs = [load(p) for p in sys.argv[1].split(",")]
shapes = [(1536, 1536), (256, 1536), (256, 1536), (1536, 1536), (8960, 1536), (8960, 1536), (1536, 8960)]
ws = [[libs[0].pack(torch.randn(n, k, dtype=torch.bfloat16) * 0.02) for n, k in shapes] for _ in range(28)]
macs = sum(n * k for n, k in shapes) * 28
for rows in [int(r) for r in (sys.argv[2:] or "1 2 4 8 16".split())]:
    xs = {k: torch.randn(rows, k, dtype=torch.bfloat16) for k in (1536, 8960)}
    outs = {n: torch.empty(rows, n, dtype=torch.bfloat16) for n in (1536, 256, 8960)}
    ref = None
    t = {i: [] for i in range(len(libs))}
    for rep in range(7):
        for i, lib in enumerate(libs):
            s = time.perf_counter()
            for layer in ws:
                for w in layer:
                    lib.gemm(xs[w.k], w, None, outs[w.n])
            t[i].append(time.perf_counter() - s)
            o = outs[1536].clone()
            if ref is None: ref = o
            assert torch.equal(ref, o), "libraries disagree"
    print(f"rows {rows:3d}: " + "  ".join(f"{statistics.median(v)*1e3:7.1f} ms ({2*macs*rows/statistics.median(v)/1e9:5.1f} GF/s)" for v in t.values()), flush=True)
