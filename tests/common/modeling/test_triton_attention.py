"""The Triton tree-attention kernel against the SDPA reference.

The kernel cases run in a subprocess (``triton_cases.py``): under the Triton interpreter
on a CPU-only machine (``TRITON_INTERPRET=1`` must be set before triton is imported, so
it cannot be set in this process without affecting other tests), natively with CUDA.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from common.modeling.attention import build_batch  # noqa: E402
from common.modeling.triton_attention import compact_mask  # noqa: E402

ROOT_DIR = Path(__file__).resolve().parents[3]
CASES = Path(__file__).with_name("triton_cases.py")
CASES_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, str(CASES), device], cwd=ROOT_DIR, env=env, capture_output=True,
                          text=True, timeout=CASES_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {c["name"]: c for c in json.loads(proc.stdout.strip().splitlines()[-1])}


def check(case: dict) -> None:
    assert case["finite"], case
    assert case["zero_rows"], case
    assert case["err"] <= case["tol"], case


class TestKernelAgainstSdpa:
    """Kernel output equals SDPA with the dense mask within dtype tolerance."""

    def test_largest_tree_and_prefix_fp32(self, results):
        """128 nodes over a 300-token prefix with 6 query heads per KV head match tightly in fp32."""
        check(results["max"])
        assert results["max"]["err"] < 1e-5

    def test_largest_tree_and_prefix_bf16(self, results):
        """The same shape in bf16 stays within bf16 tolerance."""
        check(results["max-bf16"])

    def test_random_trees(self, results):
        """Random trees, prefixes, batch sizes, GQA ratios 1/2/6 and all three dtypes match."""
        randoms = [c for name, c in results.items() if name.startswith("random-")]
        assert {c["dtype"] for c in randoms} == {"torch.float32", "torch.bfloat16", "torch.float16"}
        for c in randoms:
            check(c)

    def test_single_node(self, results):
        """A one-node tree with no prefix (it sees only itself) and one after a prefix match."""
        check(results["single-node"])
        check(results["single-node-prefix"])

    def test_fully_masked_row_is_zero(self, results):
        """A query row that may attend to nothing comes out as zeros, not NaN."""
        check(results["masked-row"])
        check(results["masked-row-bf16"])


class TestModelForward:
    """The decoder's forward gives the same hidden states with the kernel."""

    def test_tiny_model_padded_batch(self, results):
        """A padded two-sequence tiny-model forward through the kernel matches the CPU SDPA forward."""
        check(results["model"])


class TestDraftLevels:
    """The draft model's level passes attend correctly where CUDA would use the kernel."""

    def test_deep_trees_equal_sdpa(self, results):
        """Trees 3+ levels deep (rows that see ancestors cached by earlier levels, not a prefix run) are
        drafted exactly as with SDPA: the kernel assumes a run, so those passes must use the dense mask."""
        case = results["draft"]
        assert case["max_depth"] >= 3, case
        assert case["same_trees"], case
        check(case)


class TestCompactMask:
    """The dense mask converts to prefix lengths plus packed ancestor bits."""

    def test_worked_example(self):
        """Prefix 2, one pending token, tree parents [-1, 0, -1]: rows see pending + ancestors + self."""
        _, _, mask = build_batch([2], [[5]], [np.array([1, 2, 3])], [np.array([-1, 0, -1], np.int32)])
        vis, bits = compact_mask(mask, torch.tensor([2]))
        assert vis.tolist() == [[2, 2, 2, 2]]
        assert bits[0, :, 0].tolist() == [0b1, 0b11, 0b111, 0b1001]

    def test_bit_63_and_second_word(self):
        """A 70-node chain sets all 64 bits of word 0 (as int64 -1) and spills into word 1."""
        parents = np.arange(-1, 69, dtype=np.int32)
        _, _, mask = build_batch([0], [[]], [np.zeros(70, np.int64)], [parents])
        vis, bits = compact_mask(mask, torch.tensor([0]))
        assert bits.shape == (1, 70, 2) and int(vis.sum()) == 0
        assert bits[0, 63].tolist() == [-1, 0]
        assert bits[0, 69].tolist() == [-1, 0b111111]

    def test_padding_rows_see_column_zero(self):
        """A shorter sequence's padding rows keep only prefix column 0 (build_batch's rule)."""
        trees = [np.array([1, 2, 3]), np.array([4])]
        _, _, mask = build_batch([3, 4], [[1], [1]], trees, [np.array([-1, 0, 1], np.int32), np.array([-1], np.int32)])
        vis, bits = compact_mask(mask, torch.tensor([3, 4]))
        assert vis[1].tolist() == [4, 4, 1, 1]
        assert bits[1, 2:, 0].tolist() == [0, 0]
