"""Tree-attention cases for the Triton kernel, run in a subprocess with TRITON_INTERPRET=1.

``python tests/common/modeling/triton_cases.py [cpu|cuda]`` prints one JSON list: per case its name,
dtype, max |kernel - SDPA reference| over rows that see at least one key, the tolerance,
and whether fully-masked rows came out as exact zeros. The interpreter flag must be set
before triton is imported, hence a separate process (see test_triton_attention.py); with
``cuda`` the kernel runs natively on the GPU instead (the reference stays on the CPU).
"""

from __future__ import annotations

import functools
import json
import os
import sys

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, os.getcwd())

import numpy as np  # noqa: E402
import torch  # noqa: E402

from common.modeling.attention import build_batch, tree_attention  # noqa: E402
from common.modeling.kv_cache import KVCache  # noqa: E402
from common.modeling.triton_attention import TritonTreeAttention, tree_attention_triton  # noqa: E402

HEAD_DIM = 32
KV_HEADS = 2
MAX_LEN = 512
TOLERANCE = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}  # max abs error


def random_parents(rng: np.random.Generator, n: int) -> np.ndarray:
    """A random tree in topological order: parents[i] uniform in [-1, i)."""
    return np.array([rng.integers(-1, i) for i in range(n)], np.int32)


def run_case(name: str, seed: int, dtype, ratio: int, prefix: list[int], pending: list[int],
             nodes: list[int], masked_row: int | None = None) -> dict:
    """Compare the kernel with fp32 SDPA on the same (dtype-rounded) inputs."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    heads = KV_HEADS * ratio
    cache = KVCache(1, len(prefix) + 1, MAX_LEN, KV_HEADS, HEAD_DIM, dtype, DEVICE)
    cache.k.normal_()
    cache.v.normal_()
    slots = list(range(1, len(prefix) + 1))  # slot 0 unused: exercises slot indexing
    for s, p in zip(slots, prefix):
        cache.lengths[s] = p
    parents = [random_parents(rng, n) for n in nodes]
    trees = [rng.integers(0, 100, n) for n in nodes]
    _, _, mask = build_batch(prefix, [list(range(k)) for k in pending], trees, parents)
    if masked_row is not None:
        mask[0, 0, masked_row] = False
    q = torch.randn(len(prefix), mask.shape[2], heads, HEAD_DIM).to(dtype)
    ref_cache = KVCache(1, cache.num_slots, MAX_LEN, KV_HEADS, HEAD_DIM, torch.float32)
    ref_cache.k.copy_(cache.k.float().cpu())
    ref_cache.v.copy_(cache.v.float().cpu())
    ref = tree_attention(q.float(), ref_cache, 0, slots, mask)  # [B, T, heads * D]
    out = tree_attention_triton(q.to(DEVICE), cache, 0, slots, mask.to(DEVICE)).float().cpu()
    seen = mask[:, 0].any(-1)  # [B, T]
    return {"name": name, "dtype": str(dtype), "err": float((out - ref)[seen].abs().max()),
            "tol": TOLERANCE[dtype], "finite": bool(out.isfinite().all()),
            "zero_rows": bool((out[~seen] == 0).all())}


def model_case() -> dict:
    """Tiny model: a padded 2-sequence forward through the kernel (on DEVICE; one
    TritonTreeAttention shared by both layers) equals the SDPA forward on the CPU."""
    import common.modeling.model as model_mod
    from common.modeling.loader import load_model
    from common.modeling.runner import forward_segments
    rng = np.random.default_rng(7)
    parents = [random_parents(rng, 6), random_parents(rng, 2)]
    trees = [rng.integers(0, 1000, len(p)) for p in parents]
    hidden = {}
    pick = model_mod.tree_attention_for  # on CUDA it picks TritonTreeAttention itself
    for name, attn, dev in (("sdpa", lambda mask, cache, slots, prefix_run=True: tree_attention, "cpu"),
                            ("triton", lambda mask, cache, slots, prefix_run=True: TritonTreeAttention(mask, cache, slots),
                             DEVICE)):
        model_mod.tree_attention_for = attn
        model, _ = load_model("tiny-random:0", "float32", dev)
        out = forward_segments(model, model.new_cache(2, 64), [0, 1], [[1, 2, 3, 4], [5]], trees, parents)
        hidden[name] = [h.cpu() for h in out]
    model_mod.tree_attention_for = pick
    err = max(float((a - b).abs().max()) for a, b in zip(hidden["sdpa"], hidden["triton"]))
    return {"name": "model", "dtype": "torch.float32", "err": err, "tol": 1e-4, "finite": True, "zero_rows": True}


def draft_case() -> dict:
    """The draft's trees (3 levels deep and wider, whose level passes see ancestors cached by earlier
    levels) drafted with the attention CUDA picks equal those drafted with SDPA on the CPU: the same
    tokens and parents, and log-probabilities within ``tol``."""
    import common.modeling.model as model_mod
    from common import wire
    from common.modeling.loader import load_model
    from services.draft.runner import DraftRunner
    seqs = [wire.DraftSeq(seq_id="a", prefix_len=0, new_tokens=[5, 17, 99, 3, 42], tree_size=24, max_depth=5),
            wire.DraftSeq(seq_id="b", prefix_len=0, new_tokens=[7, 8], tree_size=24, max_depth=5)]
    trees, pick = {}, model_mod.tree_attention_for
    for name, attn, dev in (("sdpa", lambda mask, cache, slots, prefix_run=True: tree_attention, "cpu"),
                            ("cuda-rule", functools.partial(pick, kernel=True), DEVICE)):
        model_mod.tree_attention_for = attn
        model, _ = load_model("tiny-random:0", "float32", dev)
        model.exact_lib = None  # every pass through the attention under test
        out = DraftRunner(model, 2, 128, topk=3, width=3, min_path_prob=0.0).step(wire.DraftStep(round=1, seqs=seqs))
        trees[name] = {k: (t.tokens.numpy(), t.parents.numpy(), t.scores.numpy()) for k, t in out.trees.items()}
    model_mod.tree_attention_for = pick
    same = all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
               for a, b in zip(trees["sdpa"].values(), trees["cuda-rule"].values()))
    err = max(float(np.abs(a[2] - b[2]).max()) if same else float("inf")
              for a, b in zip(trees["sdpa"].values(), trees["cuda-rule"].values()))
    depth = max(int(np.max(_depths(t[1]))) for t in trees["sdpa"].values())
    return {"name": "draft", "dtype": "torch.float32", "err": err, "tol": 1e-3, "finite": True, "zero_rows": True,
            "same_trees": same, "max_depth": depth}


def _depths(parents: np.ndarray) -> np.ndarray:
    """Depth (1 = a child of the root) of each node of a parents array (parents before children)."""
    d = np.zeros(len(parents), np.int64)
    for i, p in enumerate(parents):
        d[i] = 1 if p < 0 else d[p] + 1
    return d


def cases() -> list[dict]:
    """Random trees (1-128 nodes, prefix 0-300, GQA ratios 1/2/6) and edge cases."""
    dtypes = [torch.float32, torch.bfloat16, torch.float16]
    rng = np.random.default_rng(1234)
    out = [run_case("max", 0, torch.float32, 6, [300], [2], [128]),
           run_case("max-bf16", 1, torch.bfloat16, 6, [300], [1], [128]),
           run_case("single-node", 2, torch.float32, 1, [0], [0], [1]),
           run_case("single-node-prefix", 3, torch.bfloat16, 2, [17], [1], [1]),
           run_case("masked-row", 4, torch.float32, 2, [40, 5], [2, 1], [9, 3], masked_row=3),
           run_case("masked-row-bf16", 5, torch.bfloat16, 6, [0], [1], [4], masked_row=0)]
    for i in range(6):
        b = int(rng.integers(1, 3))
        out.append(run_case(f"random-{i}", 100 + i, dtypes[i % 3], (1, 2, 6)[i % 3],
                            [int(x) for x in rng.integers(0, 301, b)], [int(x) for x in rng.integers(1, 4, b)],
                            [int(x) for x in rng.integers(1, 129, b)]))
    return out + [model_case(), draft_case()]


if __name__ == "__main__":
    print(json.dumps(cases()))
