"""Batch-1 verify steps of the real main model: the attention limits measured at start against the C++
kernel for every pass, taking turns step by step in one process.

Loads the configured main model (``load_pair``, which runs or reads the start-up probes), prefills one
random 300-token prompt, then for each tree layout (plain, chains of 4 and 8 nodes, stars of 15 and 31)
times ``--reps`` verify steps per arm, the arms alternating (ABBA), and prints the median ms per arm and
their ratio (measured over C++ kernel; above 1: the measured limits route the pass to a slower kernel).
The KV context grows by the accepted tokens (random tokens: few). CPU, bf16.

    OMP_NUM_THREADS=2 PYTHONPATH=$PWD .venv/bin/python scripts/attention_route_ab.py [--reps 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from common import wire
from common.config import load_config
from common.modeling.build import load_pair
from common.tree import TokenTree
from services.verifier.runner import VerifierRunner

PARAMS = wire.SamplingParams(max_tokens=4096, ignore_eos=True)


def layouts() -> dict[str, TokenTree]:
    """Name -> tree: plain (no nodes), chains of 4 and 8 nodes, stars of 15 and 31 (rows = nodes + 1)."""
    def star(n):
        return TokenTree.build(np.arange(100, 100 + n), np.full(n, -1))

    def chain(n):
        return TokenTree.build(np.arange(100, 100 + n), np.arange(-1, n - 1))
    return {"plain": TokenTree.empty(), "chain4": chain(4), "chain8": chain(8), "star15": star(15), "star31": star(31)}


class OneSequence:
    """A one-slot verifier and its sequence's (prefix length, tokens to append) between steps."""

    def __init__(self, main, prompt_tokens: int = 300) -> None:
        self.runner = VerifierRunner(main, slots=1, max_len=4096)
        self.prefix, self.new = 0, np.random.default_rng(0).integers(1000, 20000, prompt_tokens).tolist()
        self.round = 0

    def step(self, tree: TokenTree) -> float:
        """One verify step over ``tree``; its wall time in ms. Commits what it accepted."""
        self.round += 1
        seq = wire.VerifySeq(seq_id="s", prefix_len=self.prefix, new_tokens=self.new, tree=wire.tree_to_wire(tree),
                             params=PARAMS)
        start = time.perf_counter()
        out = self.runner.step(wire.VerifyStep(round=self.round, seqs=[seq])).outs["s"]
        ms = (time.perf_counter() - start) * 1e3
        self.prefix, self.new = self.prefix + len(self.new) + len(out.accepted), [out.bonus]
        return ms


def main() -> None:
    """Time every layout on both arms and print one line each."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    model = load_pair(load_config(None, {}), with_draft=False)[0]
    measured = model.exact_limits
    print("measured limits:", measured)
    seq = OneSequence(model)
    seq.step(TokenTree.empty())  # the prefill
    for name, tree in layouts().items():
        ms: dict[str, list[float]] = {"measured": [], "exact": []}
        for i in range(args.reps):
            for arm in ("measured", "exact") if i % 2 == 0 else ("exact", "measured"):
                model.exact_limits = measured if arm == "measured" else None
                ms[arm].append(seq.step(tree))
        a, b = statistics.median(ms["measured"]), statistics.median(ms["exact"])
        print(f"{name:7s} rows {len(tree) + 1:3d}: measured limits {a:6.1f} ms | C++ kernel {b:6.1f} ms | "
              f"ratio {a / b:.3f} (context {seq.prefix})")
    model.exact_limits = measured


if __name__ == "__main__":
    main()
