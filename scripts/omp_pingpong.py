"""Synthetic: two bf16 workloads taking turns, in one process or in two processes that ping-pong.

The service runs the draft model and the main model in separate processes that take turns on the same
cores; ``treespec bench`` runs both in one process. This script isolates that difference from the models:
workload A (``--a-mats`` bf16 [4096, 4096] matrices times an [8, 4096] activation, torch's ``F.linear``)
and workload B (``--b-mats`` of them) alternate B, A, B, A, ... either in this process (one OpenMP pool)
or in two spawned processes driven over pipes (two pools). Prints the median ms of A and of B per mode,
the modes' order mirrored across ``--rounds``, and writes them (``--json``) with the CPU model and the
OpenMP environment (``OMP_WAIT_POLICY``, ``GOMP_SPINCOUNT``), which is what to vary:

    PYTHONPATH=$PWD .venv/bin/python scripts/omp_pingpong.py --json out.json
    OMP_WAIT_POLICY=PASSIVE PYTHONPATH=$PWD .venv/bin/python scripts/omp_pingpong.py --json out.json

About 20 s per mode and round on a 2-core host.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time

import torch

from treespec.bench import write_json
from common.host import cpu_model

WARM = 3  # leading passes left out of each median
THREADS = 2  # torch threads per process (the 2-core hosts here)


def weights(n: int, seed: int) -> list[torch.Tensor]:
    """``n`` random bf16 [4096, 4096] matrices (32 MiB each)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(4096, 4096, generator=g).to(torch.bfloat16) for _ in range(n)]


def timed_pass(ws: list[torch.Tensor], x: torch.Tensor) -> float:
    """ms of one pass: ``x`` [8, 4096] bf16 times every matrix of ``ws``."""
    t = time.perf_counter()
    for w in ws:
        torch.nn.functional.linear(x, w)
    return (time.perf_counter() - t) * 1e3


def one_process(a_mats: int, b_mats: int, passes: int) -> tuple[float, float]:
    a, b, x = weights(a_mats, 1), weights(b_mats, 2), torch.randn(8, 4096).to(torch.bfloat16)
    ta, tb = [], []
    for _ in range(passes):
        tb.append(timed_pass(b, x))
        ta.append(timed_pass(a, x))
    return statistics.median(ta[WARM:]), statistics.median(tb[WARM:])


def _serve(n: int, seed: int, conn) -> None:
    """Child: one pass per message, the pass times sent back at the end (a None message)."""
    torch.set_num_threads(THREADS)
    ws, x, got = weights(n, seed), torch.randn(8, 4096).to(torch.bfloat16), []
    while conn.recv() is not None:
        got.append(timed_pass(ws, x))
        conn.send(True)
    conn.send(got)


def two_processes(a_mats: int, b_mats: int, passes: int) -> tuple[float, float]:
    pipes = [mp.Pipe() for _ in range(2)]
    procs = [mp.Process(target=_serve, args=(n, seed, child)) for n, seed, (_, child)
             in ((a_mats, 1, pipes[0]), (b_mats, 2, pipes[1]))]
    for p in procs:
        p.start()
    (pa, _), (pb, _) = pipes
    for _ in range(passes):
        for conn in (pb, pa):
            conn.send(True)
            conn.recv()
    times = []
    for conn in (pa, pb):
        conn.send(None)
        times.append(statistics.median(conn.recv()[WARM:]))
    for p in procs:
        p.join()
    return times[0], times[1]



def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a-mats", type=int, default=28)
    ap.add_argument("--b-mats", type=int, default=8)
    ap.add_argument("--passes", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(THREADS)
    mp.set_start_method("spawn")
    rows = []
    for r in range(args.rounds):
        for mode in (("one", "two") if r % 2 == 0 else ("two", "one")):
            fn = one_process if mode == "one" else two_processes
            a_ms, b_ms = fn(args.a_mats, args.b_mats, args.passes)
            rows.append({"mode": mode, "a_ms": round(a_ms, 2), "b_ms": round(b_ms, 2)})
            print(f"{mode} process(es): A {a_ms:.1f} ms, B {b_ms:.1f} ms (medians)", flush=True)
    env = {k: os.environ.get(k) for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = {"cpu_model": cpu_model(), "threads": THREADS, "env": env, "args": vars(args), "rows": rows}
    if args.json:
        write_json(args.json, out)  # atomic: no half-written file
    return 0


if __name__ == "__main__":
    sys.exit(main())
