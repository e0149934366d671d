"""The Triton tree-attention kernel on the real Qwen pair, on the CPU (issue 6).

Runs treespec's in-process engine (real 1.5B main + 0.5B draft, tree verification)
on HumanEval prompts twice: with the CPU attention path (SDPA + dense mask) and with every
attention call of the main model routed through the Triton kernel under Triton's
interpreter (``TRITON_INTERPRET=1``, which this script sets). Prints JSON: the greedy
tokens of both runs, whether they are identical, and the largest logit difference of one
verification pass over a real draft tree.

Usage: .venv/bin/python scripts/triton_real_check.py [--prompts 2] [--tokens 24]
(fp32, so that greedy output must match exactly; a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from common import wire  # noqa: E402
from common.config import load_config  # noqa: E402
from common.modeling import model as model_module  # noqa: E402
from common.modeling.attention import tree_attention as sdpa_attention  # noqa: E402
from treespec.engine import build_local_engine  # noqa: E402
from common.modeling.runner import forward_segments  # noqa: E402
from common.modeling.triton_attention import TritonTreeAttention  # noqa: E402
from treespec.bench_data import load_prompts  # noqa: E402


def sdpa_for(mask, cache, slots):
    """The CPU attention path for every layer of one forward pass (as ``attention.tree_attention_for``)."""
    return sdpa_attention


def generate(engine, tok, prompts, n: int) -> tuple[list[list[int]], float]:
    t0 = time.perf_counter()
    params = wire.SamplingParams(max_tokens=n, ignore_eos=True)
    outs = [[t for d in engine.generate(f"r{i}-{time.monotonic_ns()}", p, params) for t in d.tokens]
            for i, p in enumerate(prompts)]
    return outs, time.perf_counter() - t0


def one_pass_diff(engine, prompt: list[int]) -> float:
    """Max |logit| difference between the two attention paths on one verification pass
    over a 16-node draft tree drafted by the real draft model for ``prompt``."""
    probe = wire.DraftSeq(seq_id="probe", prefix_len=0, new_tokens=prompt, tree_size=16, max_depth=6)
    draft = engine.draft.step(wire.DraftStep(round=0, seqs=[probe]))
    engine.draft.free(["probe"])
    tree = wire.tree_from_wire(draft.trees["probe"])
    main = engine.verifier.model
    logits = []
    for attend in (sdpa_for, TritonTreeAttention):
        model_module.tree_attention_for = attend
        cache = main.new_cache(1, len(prompt) + 64)
        slot = cache.allocate()
        h = forward_segments(main, cache, [slot], [prompt], [tree.tokens], [tree.parents])[0]
        logits.append(main.logits(h[len(prompt) - 1:]).float())
    return float((logits[0] - logits[1]).abs().max())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=24)
    args = ap.parse_args()
    cfg = load_config(None, {"dtype": "float32", "draft_quantization": "none"})
    engine, tok = build_local_engine(cfg, slots=2, tree=(16, 6))
    prompts = [tok.encode(p.text) for p in load_prompts("humaneval", args.prompts)]
    model_module.tree_attention_for = sdpa_for
    ref, ref_s = generate(engine, tok, prompts, args.tokens)
    model_module.tree_attention_for = TritonTreeAttention
    tri, tri_s = generate(engine, tok, prompts, args.tokens)
    diff = one_pass_diff(engine, prompts[0])
    print(json.dumps({"prompts": len(prompts), "tokens": args.tokens, "identical": ref == tri,
                      "max_abs_logit_diff_one_pass": diff, "sdpa_s": round(ref_s, 1),
                      "triton_interpreter_s": round(tri_s, 1), "sdpa_tokens": ref, "triton_tokens": tri,
                      "torch": torch.__version__, "interpret": os.environ.get("TRITON_INTERPRET"),
                      "mean_prompt_tokens": float(np.mean([len(p) for p in prompts]))}, indent=1))
    return 0 if ref == tri else 1


if __name__ == "__main__":
    sys.exit(main())
