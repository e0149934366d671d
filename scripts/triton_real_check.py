"""The Triton tree-attention kernel on the real Qwen pair, on the CPU (issue 6).

Runs treespec's in-process engine (real 1.5B main + 0.5B draft, tree verification)
on HumanEval prompts twice: with the CPU attention path (SDPA + dense mask) and with every
attention call routed as on CUDA (the Triton kernel under Triton's interpreter,
``TRITON_INTERPRET=1``, which this script sets; SDPA for the draft's deeper level passes).
Prints JSON: the greedy tokens of both runs, whether they are identical, the largest logit
difference of one verification pass over a real draft tree, and whether the real draft's
tree is the same through the CUDA choice (and through the kernel for every pass, as before
2026-12-04).

Usage: .venv/bin/python scripts/triton_real_check.py [--prompts 2] [--tokens 24] [--out FILE]
(fp32, so that greedy output must match exactly; a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import functools
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
from common.modeling.attention import tree_attention as sdpa_attention, tree_attention_for  # noqa: E402
from treespec.engine import build_local_engine  # noqa: E402
from common.modeling.runner import forward_segments  # noqa: E402
from common.modeling.triton_attention import TritonTreeAttention  # noqa: E402
from treespec.bench_data import load_prompts  # noqa: E402


def sdpa_for(mask, cache, slots, prefix_run=True):
    """The CPU attention path for every layer of one forward pass (as ``attention.tree_attention_for``)."""
    return sdpa_attention


# attention.tree_attention_for's choice on CUDA: the kernel unless a row's cached columns are not a
# leading run (the draft's deeper level passes), then SDPA with the dense mask
cuda_rule = functools.partial(tree_attention_for, kernel=True)


def kernel_everywhere(mask, cache, slots, prefix_run=True):
    """The choice before 2026-12-04 (the kernel for every pass on CUDA, the draft's levels included)."""
    return TritonTreeAttention(mask, cache, slots)


def draft_tree(engine, prompt: list[int], attend) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """tokens, parents, scores of a 16-node, 6-deep tree the real draft model drafts for ``prompt``."""
    model_module.tree_attention_for = attend
    probe = wire.DraftSeq(seq_id="probe", prefix_len=0, new_tokens=prompt, tree_size=16, max_depth=6)
    tree = engine.draft.step(wire.DraftStep(round=0, seqs=[probe])).trees["probe"]
    engine.draft.free(["probe"], keep=False)
    return tree.tokens.numpy(), tree.parents.numpy(), tree.scores.numpy()


def draft_check(engine, prompt: list[int]) -> dict:
    """Does the draft model's tree through the CUDA rule (and through the kernel everywhere) equal the SDPA tree?"""
    ref = draft_tree(engine, prompt, sdpa_for)
    out = {}
    for name, attend in (("cuda_rule", cuda_rule), ("kernel_everywhere", kernel_everywhere)):
        got = draft_tree(engine, prompt, attend)
        same = all(np.array_equal(a, b) for a, b in zip(ref[:2], got[:2]))
        out[name] = {"identical_tree": same, "max_abs_score_diff": float(np.abs(ref[2] - got[2]).max()) if same else None,
                     "first_differing_node": None if same else int(np.argmax(ref[0] != got[0]))}
    return out


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
    for attend in (sdpa_for, cuda_rule):
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
    ap.add_argument("--out", help="also write the JSON here (stdout carries the engine's log lines too)")
    args = ap.parse_args()
    cfg = load_config(None, {"dtype": "float32", "draft_quantization": "none"})
    engine, tok = build_local_engine(cfg, slots=2, tree=(16, 6))
    for model in (engine.draft.model, engine.verifier.model):
        model.exact_lib = None  # as on CUDA (no exact-attention library): every pass through the attention under test
    prompts = [tok.encode(p.text) for p in load_prompts("humaneval", args.prompts)]
    model_module.tree_attention_for = sdpa_for
    ref, ref_s = generate(engine, tok, prompts, args.tokens)
    model_module.tree_attention_for = cuda_rule
    tri, tri_s = generate(engine, tok, prompts, args.tokens)
    diff = one_pass_diff(engine, prompts[0])
    drafts = draft_check(engine, prompts[0])
    report = json.dumps({"prompts": len(prompts), "tokens": args.tokens, "identical": ref == tri,
                         "max_abs_logit_diff_one_pass": diff, "draft_tree": drafts, "sdpa_s": round(ref_s, 1),
                         "triton_interpreter_s": round(tri_s, 1), "sdpa_tokens": ref, "triton_tokens": tri,
                         "torch": torch.__version__, "interpret": os.environ.get("TRITON_INTERPRET"),
                         "mean_prompt_tokens": float(np.mean([len(p) for p in prompts]))}, indent=1)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n")
    return 0 if ref == tri and drafts["cuda_rule"]["identical_tree"] else 1


if __name__ == "__main__":
    sys.exit(main())
