"""How far do bf16 logits of the same position differ between one-token decoding and a
multi-token verification pass? Justifies the bench's tie tolerance (TIE_TOLERANCE).

Decodes N tokens greedily one at a time (recording each step's logits), then scores the
same tokens as a draft chain in one verification-shaped forward (1 pending + N - 1 tree
nodes), and reports the largest absolute logit difference per position.
Usage: .venv/bin/python scripts/bf16_logit_drift.py [N] [dtype]   (prints JSON)
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common.config import load_config  # noqa: E402
from common.modeling.build import main_model  # noqa: E402
from common.modeling.runner import forward_segments  # noqa: E402

EMPTY = (np.zeros(0, np.int64), np.zeros(0, np.int32))


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    dtype = sys.argv[2] if len(sys.argv) > 2 else "bfloat16"
    model, tok = main_model(load_config(None, {"dtype": dtype}))
    with gzip.open(ROOT / "benchmarks" / "data" / "humaneval" / "HumanEval.jsonl.gz", "rt") as f:
        prompts = [json.loads(line)["prompt"] for line in f][:5]
    diffs = []
    for text in prompts:
        ids = tok(text)["input_ids"]
        cache = model.new_cache(2, len(ids) + 2 * n + 8)
        a, b = cache.allocate(), cache.allocate()
        h = forward_segments(model, cache, [a, b], [ids, ids], [EMPTY[0]] * 2, [EMPTY[1]] * 2)
        cache.commit(a, list(range(len(ids))))
        cache.commit(b, list(range(len(ids) - 1)))
        step = [model.logits(h[0][-1:])[0]]
        out = [int(step[0].argmax())]
        for _ in range(n - 1):
            h = forward_segments(model, cache, [a], [[out[-1]]], [EMPTY[0]], [EMPTY[1]])
            cache.commit(a, [cache.lengths[a]])
            step.append(model.logits(h[0])[0])
            out.append(int(step[-1].argmax()))
        chain = np.asarray(out[:-1], np.int64), np.arange(-1, n - 2, dtype=np.int32)
        hv = forward_segments(model, cache, [b], [[ids[-1]]], [chain[0]], [chain[1]])
        multi = model.logits(hv[0])  # [n, V]: root + chain nodes
        diffs += [float((multi[i] - step[i]).abs().max()) for i in range(n)]
    print(json.dumps({"dtype": dtype, "positions": len(diffs), "max_abs_logit_diff": max(diffs),
                      "p99": float(np.percentile(diffs, 99)), "median": float(np.median(diffs))}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
