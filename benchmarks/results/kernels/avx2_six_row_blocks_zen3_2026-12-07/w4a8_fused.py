"""ms of the 0.5B draft's fused W4A8 projections (24 layers x QKV, O, gate_up, down; random int4 weights) called
straight through ctypes, by rows, and one large call for the kernel's streaming rate; medians of 15.
    PYTHONPATH=$PWD .venv/bin/python benchmarks/results/kernels/avx2_six_row_blocks_zen3_2026-12-07/w4a8_fused.py 1 2 4"""
import statistics, sys, time, torch, ctypes
from common.modeling.native import library
from common.modeling.quant import int4_codes
torch.set_num_threads(2)
lib = library()
shapes = [(1152, 896), (896, 896), (9728, 896), (896, 4864)]
def pk(n, k):
    codes, sz = int4_codes((torch.randn(n, k) * 0.02).bfloat16())
    return lib.pack_w4a8(codes, sz)
ws = [[pk(n, k) for n, k in shapes] for _ in range(24)]
byts = sum(w.nbytes for l in ws for w in l)
f = lib._gemm["w4a8"]
for rows in [int(r) for r in (sys.argv[1:] or "1 2 4".split())]:
    xs = {k: torch.randn(rows, k, dtype=torch.bfloat16) for k in (896, 4864)}
    outs = {n: torch.empty(rows, n, dtype=torch.bfloat16) for n, _ in shapes}
    calls = [(xs[w.k].data_ptr(), w.data.data_ptr(), w.scales.data_ptr(), 0, outs[w.n].data_ptr(), rows, w.n, w.k, 2, 0) for l in ws for w in l]
    t = []
    for rep in range(15):
        s = time.perf_counter()
        for c in calls: f(*c)
        t.append(time.perf_counter() - s)
    m = statistics.median(t)
    print(f"rows {rows}: {m*1e3:.2f} ms for {len(calls)} calls, {byts/m/1e9:.1f} GB/s ({byts/1e6:.0f} MB)")
# one big call for reference: gate_up of all layers' size
big = pk(9728 * 8, 896)
x = torch.randn(1, 896, dtype=torch.bfloat16); o = torch.empty(1, 9728 * 8, dtype=torch.bfloat16)
t = []
for rep in range(15):
    s = time.perf_counter(); f(x.data_ptr(), big.data.data_ptr(), big.scales.data_ptr(), 0, o.data_ptr(), 1, 9728 * 8, 896, 2, 0); t.append(time.perf_counter() - s)
m = statistics.median(t); print(f"one 77824x896 call, 1 row: {m*1e3:.2f} ms, {big.nbytes/m/1e9:.1f} GB/s")
