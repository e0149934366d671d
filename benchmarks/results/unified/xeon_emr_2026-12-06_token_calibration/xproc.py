"""Does a draft step in another process slow the verify pass after it? Two processes take turns as the
service's draft worker and verifier do (2 OpenMP threads each, GOMP_SPINCOUNT=30000): V runs the seven
projection matmuls of a Qwen2.5-1.5B layer x 28 over ROWS rows (bf16, random weights); D runs a 0.5B-sized
forward (24 layers, 896/4864) over DROWS rows. Conditions, alternated in blocks: 'draft' (D computes between V's
passes), 'idle' (D only echoes), per-pass ms of V. Usage: python xproc.py ROWS DROWS BLOCKS"""
import os, sys, time
os.environ.setdefault("GOMP_SPINCOUNT", "30000")
import multiprocessing as mp


def layers(n, hidden, inter, kv):
    import torch
    g = torch.Generator().manual_seed(0)
    shapes = [(hidden, hidden), (kv, hidden), (kv, hidden), (hidden, hidden), (inter, hidden), (inter, hidden), (hidden, inter)]
    return [[(torch.randn(o, i, generator=g) * 0.02).to(torch.bfloat16) for o, i in shapes] for _ in range(n)]


def forward(ws, x):
    import torch.nn.functional as F
    for q, k, v, o, gt, up, dn in ws:
        h = F.linear(x, q); F.linear(x, k); F.linear(x, v); h = F.linear(h, o)
        a = F.linear(h, gt) * F.linear(h, up); x = F.linear(a, dn) + x
    return x


def worker(role, conn, rows):
    import torch
    torch.set_num_threads(2)
    ws = layers(28, 1536, 8960, 256) if role == "V" else layers(24, 896, 4864, 128)
    x = torch.randn(rows, ws[0][0].shape[1]).to(torch.bfloat16)
    forward(ws, x)
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg == "stop":
            return
        t = time.perf_counter()
        if msg == "run":
            forward(ws, x)
        conn.send((time.perf_counter() - t) * 1e3)


if __name__ == "__main__":
    rows, drows, blocks = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    ctx = mp.get_context("spawn")
    pv, cv = ctx.Pipe(); pd, cd = ctx.Pipe()
    V = ctx.Process(target=worker, args=("V", cv, rows)); D = ctx.Process(target=worker, args=("D", cd, drows))
    V.start(); D.start(); pv.recv(); pd.recv()
    res = {"draft": [], "idle": []}
    for b in range(blocks):
        for cond in (("draft", "idle") if b % 2 == 0 else ("idle", "draft")):
            vs, ds = [], []
            for _ in range(10):
                pd.send("run" if cond == "draft" else "echo"); ds.append(pd.recv())
                pv.send("run"); vs.append(pv.recv())
            vs.sort(); ds.sort()
            res[cond].append(vs[len(vs) // 2])
            print(f"block {b} {cond:5s} verify median {vs[5]:.1f} ms (min {vs[0]:.1f}) draft median {ds[5]:.1f} ms", flush=True)
    pv.send("stop"); pd.send("stop"); V.join(); D.join()
    for c, v in res.items():
        print(c, "verify medians:", " ".join(f"{x:.0f}" for x in v))
    print("ratio draft/idle per block pair:", " ".join(f"{a / b:.3f}" for a, b in zip(res["draft"], res["idle"])))
