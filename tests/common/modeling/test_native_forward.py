"""The native layer loop (csrc/decoder_forward.cpp via common/modeling/native_forward.py) against
DecoderModel's Python loop: same hidden states and KV rows, bit for bit, and the fallbacks."""

import numpy as np
import pytest
import torch

from common.config import Config
from common.modeling.attention import build_batch
from common.modeling.build import draft_model, main_model
from common.modeling.model import DecoderModel
from common.modeling.native import library
from common.modeling.native_forward import NativeForward
from common.modeling.quant import quantize_main_weights
from common.modeling.tiny import tiny_spec, tiny_weights

NO_LIB = pytest.mark.skipif(library() is None, reason="no C++ compiler: no native kernels at all")
NO_W4A8 = pytest.mark.skipif(not (library() and library().w4a8_fast),
                             reason="w4a8 needs a CPU with AVX512-VNNI or AVX2 (and g++)")


def _models():
    """Models whose passes take the native path: a W4A8 model with a draft's small-pass exact attention
    (at most 8 rows), one with packed bf16 projections (exact attention everywhere), and the W4A8 tiny
    main as main_model() builds it."""
    lib = library()
    spec = tiny_spec()
    small = DecoderModel(spec, quantize_main_weights(tiny_weights(spec, 3, torch.bfloat16), "w4a8", torch.bfloat16),
                         torch.bfloat16)
    small.exact_lib, small.exact_limits = lib, ((8, None),)
    dense = tiny_weights(spec, 4, torch.bfloat16)
    packed = {k: lib.pack(v) if k.endswith(".weight") and v.dim() == 2 and k.startswith("layers.") else v
              for k, v in dense.items()}
    bf16 = DecoderModel(spec, packed, torch.bfloat16)
    bf16.exact_lib = lib
    main = main_model(Config(main_model_path="tiny-random:0", dtype="bfloat16", main_quantization="w4a8"))[0]
    return {"w4a8_small_passes": small, "bf16_packed": bf16, "main": main}


@pytest.fixture(scope="module")
def models():
    return _models() if library() is not None and library().w4a8_fast else {}


def _prefill(model, prompts: list[list[int]]):
    """A cache with each prompt prefilled in its own slot (Python loop, SDPA or exact as configured)."""
    cache = model.new_cache(len(prompts), 256)
    native, model.native = model.native, None
    try:
        for slot, p in enumerate(prompts):
            t = torch.tensor([p])
            mask = torch.ones(1, 1, len(p), len(p), dtype=torch.bool).tril()
            model.forward(t, torch.arange(len(p))[None], cache, [slot], mask)
            cache.lengths[slot] = len(p)
    finally:
        model.native = native
    return cache


def _tree_pass(model, native: bool, trees: list[tuple[list[int], list[int]]]):
    """Hidden states and cache after one pass of B trees (tokens, parents) over 7- and 5-token prompts."""
    prompts = [[5, 9, 2, 7, 1, 8, 3], [4, 4, 6, 1, 2]][:len(trees)]
    cache = _prefill(model, prompts)
    tokens, pos, mask = build_batch([len(p) for p in prompts], [[] for _ in trees],
                                    [np.array(t, np.int64) for t, _ in trees],
                                    [np.array(p, np.int64) for _, p in trees])
    lengths = [len(t) for t, _ in trees]
    saved = model.native
    model.native = saved if native else None
    try:
        hidden = model.forward(tokens, pos, cache, list(range(len(trees))), mask, lengths)
    finally:
        model.native = saved
    return hidden, cache


@NO_LIB
@NO_W4A8
@pytest.mark.parametrize("name", ["w4a8_small_passes", "bf16_packed", "main"])
class TestSameAsPython:
    @pytest.mark.parametrize("trees", [
        [([11], [-1])],  # one row: a plain decode step or a draft level
        [([11, 12, 13, 14, 15], [-1, 0, 0, 1, 3])],  # a 5-node tree
        [([11, 12, 13, 14], [-1, 0, 1, 1]), ([21, 22], [-1, 0])],  # two sequences, ragged rows
    ])
    def test_hidden_states_and_kv_rows_are_bit_identical(self, models, name, trees):
        """A pass through the native loop returns the Python loop's hidden states and writes the same K/V rows."""
        model = models[name]
        assert model.native is not None and model.exact_lib is not None
        assert model.native.table(sum(len(t) for t, _ in trees)) is not None  # the pass does go native
        a, ca = _tree_pass(model, True, trees)
        b, cb = _tree_pass(model, False, trees)
        assert torch.equal(a, b)
        assert torch.equal(ca.k, cb.k) and torch.equal(ca.v, cb.v)


@NO_LIB
@NO_W4A8
def test_w4a8_main_prefill_through_the_native_loop_matches(models):
    """A W4A8 main's causal prompt prefill (exact attention there too) gives the Python loop's states."""
    model = models["main"]
    assert model.native.table(20) is not None
    outs = []
    for native in (True, False):
        cache = model.new_cache(1, 64)
        saved, model.native = model.native, (model.native if native else None)
        try:
            outs.append(model.forward(torch.arange(3, 23)[None], torch.arange(20)[None], cache, [0],
                                      torch.ones(1, 1, 20, 20, dtype=torch.bool).tril()))
        finally:
            model.native = saved
    assert torch.equal(outs[0], outs[1])


@NO_LIB
class TestFallbacks:
    def test_dense_projections_leave_the_pass_to_python(self):
        """A model whose projections are plain tensors (no packed kernel) gets no native pass: run() says None."""
        model = main_model(Config(main_model_path="tiny-random:0", dtype="bfloat16", kernel_probe=False))[0]
        nf = NativeForward(model, library())
        assert nf.table(1) is None
        x = torch.zeros(1, model.spec.hidden_size, dtype=torch.bfloat16)
        cos = torch.zeros(1, model.spec.head_dim, dtype=torch.bfloat16)
        mask = torch.ones(1, 1, 1, 1, dtype=torch.bool)
        assert nf.run(x, cos, cos, model.new_cache(1, 8), [0], [0], mask, [1]) is None

    def test_fp32_model_and_switch_off_have_no_native_pass(self, monkeypatch):
        """fp32 models keep the Python loop (their ops are torch's), and TREESPEC_NATIVE_FORWARD=0 turns the path off."""
        fp32 = main_model(Config(main_model_path="tiny-random:0", dtype="float32"))[0]
        assert fp32.native is None
        monkeypatch.setenv("TREESPEC_NATIVE_FORWARD", "0")
        off = draft_model(Config(draft_model_path="tiny-random:3", dtype="bfloat16", kernel_probe=False))[0]
        assert off.native is None
