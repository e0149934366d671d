"""Tensor-parallel verifier: weight sharding, TP=2 (gloo) vs TP=1 greedy output, shutdown."""

from __future__ import annotations

import json
import os

import jsonschema
import pytest
import torch

from common import wire
from common.config import Config
from common.modeling.grammar import GrammarMasks
from common.modeling.loader import load_model, load_weights
from common.modeling.tiny import tiny_spec, tiny_weights
from services.draft.runner import DraftRunner
from services.scheduler.core import SchedulerCore
from services.scheduler.local import LocalEngine
from services.verifier.runner import VerifierRunner
from services.verifier.tensor_parallel import TensorParallelVerifier, build_verifier, shard_weights
from tests.common.modeling.test_grammar import EOS, SCHEMA, byte_tokenizer, grammar_of

TINY_MAIN = "tiny-random:0"
TINY_DRAFT = "tiny-random:1"
SLOTS, MAX_LEN = 4, 256
PROMPTS = [[11, 22, 33, 44, 55], [7, 8, 9]]
GREEDY = wire.SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)


def byte_grammar(vocab_size: int) -> GrammarMasks:
    """Grammar masks over the byte-level test tokenizer (module-level: the ranks rebuild it)."""
    return GrammarMasks(byte_tokenizer(), vocab_size, [EOS])


def generate(verifier, prompts: list[list[int]], params: wire.SamplingParams, tree_size: int,
             eos: set[int] = frozenset()) -> list[list[int]]:
    """Greedy outputs of a batch of prompts through LocalEngine (optionally with a draft)."""
    draft = None
    if tree_size:
        model, _ = load_model(TINY_DRAFT, "float32")
        draft = DraftRunner(model, SLOTS, MAX_LEN, grammar=byte_grammar(model.spec.vocab_size))
    cfg = Config(tree_size=tree_size, max_accept_length=4, max_model_len=MAX_LEN)
    engine = LocalEngine(cfg, SchedulerCore(SLOTS, 8, MAX_LEN, set(eos)), verifier, draft)
    ids = [f"r{tree_size}-{i}" for i in range(len(prompts))]
    for rid, p in zip(ids, prompts):
        engine.submit(rid, p, params)
    out = {rid: [] for rid in ids}
    while engine.core.running or engine.core.waiting:
        for d in engine.step():
            out[d.request_id] += d.tokens
    return [out[rid] for rid in ids]


@pytest.fixture(scope="module")
def tp2():
    with TensorParallelVerifier(TINY_MAIN, "float32", SLOTS, MAX_LEN, tp_size=2, grammar=byte_grammar) as v:
        yield v


class TestShardWeights:
    """Each rank's slice re-assembles into the full weights."""

    def test_slices_reassemble(self):
        """qkv (q/k/v heads separately), gate_up (gate and up separately), o and down (columns) tile back."""
        spec = tiny_spec(vocab_size=32)
        w = tiny_weights(spec, 0)
        a, b = (shard_weights(w, spec, r, 2) for r in range(2))
        D = spec.head_dim
        q, k, v = w["layers.0.qkv.weight"].split([spec.num_heads * D, spec.num_kv_heads * D, spec.num_kv_heads * D])
        assert torch.equal(a["layers.0.qkv.weight"], torch.cat([q[:2 * D], k[:D], v[:D]]))
        assert torch.equal(b["layers.0.qkv.bias"][:2 * D], w["layers.0.qkv.bias"][2 * D:4 * D])
        gate, up = w["layers.1.gate_up.weight"].chunk(2)
        assert torch.equal(b["layers.1.gate_up.weight"], torch.cat([gate[64:], up[64:]]))
        for name in ("layers.0.o.weight", "layers.1.down.weight"):
            assert torch.equal(torch.cat([a[name], b[name]], dim=1), w[name])
        assert a["embed"] is w["embed"] and b["norm"] is w["norm"]

    def test_indivisible_heads_raise(self):
        """A world size that does not divide the KV heads is a ValueError naming the field."""
        spec = tiny_spec(vocab_size=32)
        with pytest.raises(ValueError, match="num_kv_heads"):
            shard_weights(tiny_weights(spec, 0), spec, 0, 4)


class TestTensorParallelVerifier:
    """TP=2 over gloo reproduces TP=1 and shuts down cleanly."""

    def test_build_verifier_tp1_is_plain_runner(self):
        """tp_size 1 gives an ordinary VerifierRunner."""
        assert isinstance(build_verifier(TINY_MAIN, "float32", SLOTS, MAX_LEN, 1), VerifierRunner)

    def test_greedy_plain_decoding_matches_tp1(self, tp2):
        """Plain decoding (tree_size 0) of a batch of two prompts gives identical tokens."""
        ref = generate(build_verifier(TINY_MAIN, "float32", SLOTS, MAX_LEN, 1), PROMPTS, GREEDY, 0)
        assert generate(tp2, PROMPTS, GREEDY, 0) == ref
        assert tp2.slots_used == 0 and tp2.slots_total == SLOTS

    def test_greedy_with_draft_trees_matches_tp1(self, tp2):
        """With draft trees (tree_size 8) the committed tokens are identical too."""
        ref = generate(build_verifier(TINY_MAIN, "float32", SLOTS, MAX_LEN, 1), PROMPTS, GREEDY, 8)
        assert generate(tp2, PROMPTS, GREEDY, 8) == ref

    def test_grammar_constrained_matches_tp1(self, tp2):
        """A json_schema request is masked on every rank: TP=2 gives TP=1's constrained tokens,
        and they are text the schema accepts."""
        params = wire.SamplingParams(max_tokens=40, temperature=0.0, grammar=grammar_of(SCHEMA))
        ref = generate(build_verifier(TINY_MAIN, "float32", SLOTS, MAX_LEN, 1, grammar=byte_grammar), PROMPTS,
                       params, 8, {EOS})
        out = generate(tp2, PROMPTS, params, 8, {EOS})
        assert out == ref
        for toks in out:
            assert toks[-1] == EOS
            jsonschema.validate(json.loads(bytes(toks[:-1])), SCHEMA)

    def test_second_instance_in_one_process_is_refused(self, tp2):
        """torch.distributed allows one default group per process: a second verifier is a ValueError."""
        with pytest.raises(ValueError, match="one TensorParallelVerifier"):
            TensorParallelVerifier(TINY_MAIN, "float32", SLOTS, MAX_LEN, tp_size=2)

    def test_close_leaves_no_processes(self, tp2):
        """After close() every worker process has exited (runs last: it closes the shared verifier)."""
        pids = tp2.worker_pids
        assert pids
        tp2.close()
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)


@pytest.mark.real
class TestRealModel:
    """The real 1.5B main model under TP=2."""

    def test_greedy_16_tokens_match_tp1(self):
        """qwen2.5-coder-1.5b (float32): 16 greedy tokens from TP=2 equal TP=1's."""
        _, _, tok = load_weights("qwen2.5-coder-1.5b", "float32")
        prompt = tok.encode("def fibonacci(n):\n    ")
        params = wire.SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
        ref = generate(build_verifier("qwen2.5-coder-1.5b", "float32", 1, 128, 1), [prompt], params, 0)
        with TensorParallelVerifier("qwen2.5-coder-1.5b", "float32", 1, 128, tp_size=2) as v:
            assert generate(v, [prompt], params, 0) == ref
