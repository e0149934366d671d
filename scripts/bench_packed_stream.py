"""Weight-streaming rate of the packed projection kernel over a whole model's layers.

Builds 28 layers of Qwen2.5-1.5B-shaped projections (qkv 2048x1536, o 1536x1536,
gate_up 17920x1536, down 1536x8960; random weights, each layer its own memory, so every
pass streams 2.62 GB of bf16, 1.31 GB of int8 or 0.66 GB of int4 codes from DRAM, not cache) and times one pass
over all of them for 1/4/8/16/32 rows: torch's kernels (oneDNN prepacked bf16, torch's
int8 and int4 kernels) against the packed kernel and, for int4 on AVX512-VNNI hosts, the
W4A8 kernel (int8 activations; with an AMX-INT8 build also its VNNI path alone; likewise the packed
bf16 kernel with and without its AMX-BF16 path), fastest of ``--reps``. Prints ms per
pass and GB/s (weight bytes / time) and writes JSON with the CPU model.

Usage: PYTHONPATH=. .venv/bin/python scripts/bench_packed_stream.py [--reps 5] [--layers 28]
       [--formats bf16,int8,int4] [--rows 1,4,8,16,32] [--out benchmarks/results/kernels/packed_stream.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from common.host import cpu_model
from common.modeling.kernels import KERNELS, prepare
from common.modeling.native import library
from common.modeling.quant import quantize_main_weights

SHAPES = ((2048, 1536), (1536, 1536), (17920, 1536), (1536, 8960))  # (N, K) of one layer's projections
ROWS = (1, 4, 8, 16, 32)


def _huge_pages_kb() -> int:
    for line in Path(f"/proc/{os.getpid()}/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages"):
            return int(line.split()[1])
    return 0


def _layers(count: int, fmt: str, kernel: str) -> list[list]:
    out = []
    for _ in range(count):
        layer = []
        for n, k in SHAPES:
            w = (torch.randn(n, k) * 0.02).bfloat16()
            if fmt != "bf16":
                w = quantize_main_weights({"w.weight": w}, fmt, torch.bfloat16)["w.weight"]
            layer.append(prepare(kernel, w))
        out.append(layer)
    return out


def _time(layers: list[list], kernel: str, rows: int, reps: int) -> float:
    xs = [torch.randn(rows, k).bfloat16() for _, k in SHAPES]
    run = KERNELS[kernel]
    best = float("inf")
    for _ in range(reps + 1):
        start = time.perf_counter()
        for layer in layers:
            for x, w in zip(xs, layer):
                run(x, w, None)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def _amx_variants(lib, fmt: str, kernel: str) -> tuple[str, dict[str, int | None]]:
    """(library attribute, {row name: AMX start row or None = as loaded}) for one kernel: the W4A8 and
    the packed bf16 kernels with their measured AMX start and with their AVX-512 path alone."""
    if kernel == "w4a8" and lib.w4a8_amx:
        return "w4a8_amx_rows", {"w4a8": lib.w4a8_amx_rows, "w4a8-vnni": 0}
    if kernel == "packed" and fmt == "bf16" and lib.bf16_amx:
        return "bf16_amx_rows", {"packed": lib.bf16_amx_rows, "packed-avx512": 0}
    return "", {kernel: None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--formats", default="bf16,int8,int4", help="comma-separated subset of bf16,int8,int4")
    parser.add_argument("--out", default="")
    parser.add_argument("--rows", default=",".join(map(str, ROWS)), help="comma-separated row counts, e.g. 1,2,3,4,5,6,7,8")
    args = parser.parse_args()
    rows_list = tuple(int(r) for r in args.rows.split(","))
    lib = library()
    if lib is None:
        raise SystemExit("the packed kernel did not build on this host (is g++ installed?)")
    result = {"cpu": cpu_model(), "threads": torch.get_num_threads(), "variant": lib.variant,
              "w4a8_variant": lib.w4a8_variant, "rows": rows_list, "ms": {},
              "w4a8_amx_rows": lib.w4a8_amx_rows, "bf16_amx_rows": lib.bf16_amx_rows}  # as measured: the arms below change them
    w4a8 = ("w4a8",) if lib.w4a8_fast else ()
    formats = args.formats.split(",")
    for fmt, kernels, gb in (("bf16", ("onednn", "packed"), 2.62), ("int8", ("native", "packed"), 1.31),
                             ("int4", ("int4", "packed", *w4a8), 0.66)):
        if fmt not in formats:
            continue
        for kernel in kernels:
            try:
                layers = _layers(args.layers, fmt, kernel)
            except RuntimeError as exc:  # e.g. oneDNN's bf16 reorder on CPUs without AVX-512 or AVX-NE-CONVERT
                print(f"{fmt:5s} {kernel:9s} not on this host: {str(exc).splitlines()[0]}", flush=True)
                continue
            attr, amx = _amx_variants(lib, fmt, kernel)
            for name, amx_rows in amx.items():  # a kernel with its measured AMX start, and without AMX
                if amx_rows is not None:
                    setattr(lib, attr, amx_rows)
                ms = [_time(layers, kernel, rows, args.reps) for rows in rows_list]
                result["ms"][f"{fmt}/{name}"] = [round(v, 1) for v in ms]
                gbs = [round(gb * args.layers / 28 / (v / 1e3), 1) for v in ms]
                print(f"{fmt:5s} {name:9s} ms {result['ms'][f'{fmt}/{name}']}  GB/s {gbs}  "
                      f"huge pages {_huge_pages_kb() // 1024} MiB", flush=True)
            del layers
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
