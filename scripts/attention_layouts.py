"""Main-model verify passes at a batch, by segment layout: SDPA against ``ExactAttention``.

Fills 8 KV slots of the bf16 main model with ``--context`` random tokens each, then times one forward
pass plus the LM head over segment layouts (``8x1``: eight sequences decoding one token; ``7x1+1x17``:
seven decoding, one verifying 16 tree nodes), alternating the main model's attention between SDPA
(``exact_lib`` None) and treespec's C++ kernel at any row count (``exact_limits`` None, so the
layouts past ``build.MAIN_EXACT_MAX_ROWS`` show why it is where it is), ``--reps`` times; prints min
and median ms and their ratio, and writes them as JSON with the CPU model. Not a unit test: host speed drifts,
so only the ratio within one run means anything.

    PYTHONPATH=$PWD .venv/bin/python scripts/attention_layouts.py --context 300 --json out.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from common.config import load_config
from common.modeling.native import library
from common.modeling.runner import forward_segments
from common.host import cpu_model
from treespec.engine import load_pair

LAYOUTS = (("1x1", (1,)), ("1x5", (5,)), ("1x9", (9,)), ("1x16", (16,)), ("8x1", (1,) * 8), ("8x2", (2,) * 8), ("8x3", (3,) * 8),
           ("7x1+1x9", (1,) * 7 + (9,)), ("7x1+1x17", (1,) * 7 + (17,)), ("1x33", (33,)), ("1x65", (65,)))


def chain(n: int) -> tuple[np.ndarray, np.ndarray]:
    """A chain-shaped tree of ``n`` nodes: (token ids [n] int64, parents [n] int32)."""
    return np.arange(1, n + 1, dtype=np.int64) + 500, np.arange(-1, n - 1, dtype=np.int32)


def time_layouts(model, lib, cache, slots: list[int], reps: int) -> dict[str, dict[str, list[float]]]:
    """ms of one pass (+ LM head) per layout name and kernel ("sdpa", "exact"), ``reps`` each, alternating."""
    times: dict[str, dict[str, list[float]]] = {name: {"sdpa": [], "exact": []} for name, _ in LAYOUTS}
    for _ in range(reps):
        for kernel in ("sdpa", "exact"):
            model.exact_lib, model.exact_limits = (lib, None) if kernel == "exact" else (None, None)
            for name, layout in LAYOUTS:
                trees = [chain(n - 1) for n in layout]
                t0 = time.perf_counter()
                hidden = forward_segments(model, cache, slots[:len(layout)], [[7]] * len(layout),
                                          [t for t, _ in trees], [p for _, p in trees])
                model.logits(torch.cat(hidden))
                times[name][kernel].append((time.perf_counter() - t0) * 1e3)
    return times


def main() -> None:
    """Parse the arguments, fill the KV slots, time every layout, print and write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context", type=int, default=300, help="committed tokens per sequence (default 300)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    lib = library()
    if lib is None:
        ap.error("no native library (g++ missing): nothing to compare")
    model, _, _ = load_pair(load_config(None, {}), with_draft=False)
    batch = max(len(layout) for _, layout in LAYOUTS)
    cache = model.new_cache(batch, args.context + 128)
    slots = [cache.allocate() for _ in range(batch)]
    none = np.zeros(0, np.int64), np.zeros(0, np.int32)
    for s in slots:
        prompt = [int(t) for t in torch.randint(100, 20000, (args.context,))]
        forward_segments(model, cache, [s], [prompt], [none[0]], [none[1]])
        cache.commit(s, list(range(args.context)))
    times = time_layouts(model, lib, cache, slots, args.reps)
    rows = {}
    for name, t in times.items():
        med = {k: float(np.median(v)) for k, v in t.items()}
        rows[name] = {"rows": sum(dict(LAYOUTS)[name]), **{f"{k}_min_ms": min(v) for k, v in t.items()},
                      **{f"{k}_median_ms": m for k, m in med.items()}, "exact_over_sdpa": med["exact"] / med["sdpa"]}
        r = rows[name]
        print(f"{name:10s} rows {r['rows']:3d}  sdpa {r['sdpa_median_ms']:7.1f} ms  exact {r['exact_median_ms']:7.1f} ms"
              f"  ratio {r['exact_over_sdpa']:.2f}")
    with open(args.json, "w") as f:
        json.dump({"cpu": cpu_model(), "context": args.context, "reps": args.reps, "layouts": rows}, f, indent=2)


if __name__ == "__main__":
    main()
