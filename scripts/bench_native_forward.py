"""The native decoder pass (csrc/decoder_forward.cpp) against DecoderModel's Python loop, in one process.

Loads the configured draft model (and the main model, as the engine does) and times one draft-level
pass (``--rows`` rows after a ``--context``-token prefix, LM head included) with the native loop and
with the Python loop, alternating, after checking that both give bit-identical hidden states and KV
rows. Prints JSON: ms per pass (median of each round's runs), the ratio, the CPU model.

Usage: PYTHONPATH=. .venv/bin/python scripts/bench_native_forward.py [--rows 1] [--context 200] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from common.config import load_config
from common.modeling.build import load_pair
from common.host import cpu_model


def _prefilled(model, prompt: torch.Tensor):
    cache = model.new_cache(1, 1024)
    n = prompt.shape[1]
    model.forward(prompt, torch.arange(n)[None], cache, [0], torch.ones(1, 1, n, n, dtype=torch.bool).tril())
    cache.lengths[0] = n
    return cache


def _pass(model, cache, rows: int, native: bool):
    """One pass of ``rows`` new tokens (a chain) after the cache's prefix; returns hidden states."""
    n = cache.lengths[0]
    mask = torch.ones(1, 1, rows, n + rows, dtype=torch.bool)
    mask[0, 0, :, n:] = torch.ones(rows, rows, dtype=torch.bool).tril()
    saved, model.native = model.native, (model.native if native else None)
    try:
        hidden = model.forward(torch.arange(7, 7 + rows)[None], (n + torch.arange(rows))[None], cache, [0], mask)
        model.logits(hidden[0])
    finally:
        model.native = saved
    return hidden


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--context", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    _, draft, _ = load_pair(load_config(None, {}))
    if draft.native is None:
        raise SystemExit("this draft has no native pass (no kernel library, or TREESPEC_NATIVE_FORWARD=0)")
    prompt = torch.randint(0, 1000, (1, args.context), generator=torch.Generator().manual_seed(0))
    (ha, ca), (hb, cb) = [(_pass(draft, c := _prefilled(draft, prompt), args.rows, on), c) for on in (True, False)]
    identical = torch.equal(ha, hb) and torch.equal(ca.k, cb.k) and torch.equal(ca.v, cb.v)
    cache, ms = _prefilled(draft, prompt), {True: [], False: []}
    for _ in range(args.rounds):
        for native in (True, False):
            times = []
            for _ in range(args.reps):
                start = time.perf_counter()
                _pass(draft, cache, args.rows, native)
                times.append((time.perf_counter() - start) * 1e3)
            ms[native].append(statistics.median(times))
    on, off = statistics.median(ms[True]), statistics.median(ms[False])
    print(json.dumps({"cpu": cpu_model(), "rows": args.rows, "context": args.context, "bit_identical": identical,
                      "native_ms": round(on, 2), "python_ms": round(off, 2), "python_over_native": round(off / on, 3),
                      "per_round_ms": {"native": ms[True], "python": ms[False]}}, indent=1))


if __name__ == "__main__":
    main()
