"""VerifierRunner isolation: one bad sequence fails alone, its batch neighbours are unaffected."""

from __future__ import annotations

import numpy as np
import pytest

from common import wire
from common.tree import TokenTree
from services.verifier.runner import VerifierRunner
from services.verifier.validate import invalid_reason

VOCAB = 151936
PROMPTS = {"a": [1, 2, 3], "b": [17, 4, 950, 33], "c": [300, 301, 302, 303, 304]}
CHAIN = wire.tree_to_wire(TokenTree.build(np.array([5, 6, 7], np.int64), np.array([-1, 0, 1], np.int32),
                                          np.zeros(3, np.float32)))


def entry(sid: str, **params) -> wire.VerifySeq:
    return wire.VerifySeq(seq_id=sid, prefix_len=0, new_tokens=PROMPTS[sid], tree=CHAIN, params=wire.SamplingParams(**params))


def poison(sid: str) -> wire.VerifySeq:
    """The issue's poison request as the scheduler sends it: min_tokens bans a huge stop id."""
    prm = wire.SamplingParams(max_tokens=5, min_tokens=1, stop_token_ids=[1000000000])
    return wire.VerifySeq(seq_id=sid, prefix_len=0, new_tokens=PROMPTS[sid], tree=CHAIN, params=prm, banned=[1000000000], ban_depth=1)


@pytest.fixture()
def runner(tiny_main):
    return VerifierRunner(tiny_main, 4, 64)


class TestInvalidReason:
    @pytest.mark.parametrize("field,seq", [
        ("banned", poison("b")),
        ("stop_token_ids", entry("a", stop_token_ids=[VOCAB])),
        ("history", wire.VerifySeq(seq_id="a", prefix_len=0, new_tokens=[1], tree=CHAIN, params=wire.SamplingParams(), history=[-3])),
        ("logprobs", entry("a", logprobs=10 ** 9)),
        ("top_k", entry("a", top_k=-5)),
        ("temperature", entry("a", temperature=float("nan"))),
    ])
    def test_names_the_bad_field(self, field, seq):
        """Out-of-vocabulary ids and out-of-range parameters are refused naming the field."""
        assert field in invalid_reason(seq, VOCAB)

    def test_valid_entry_passes(self):
        """A well-formed entry has no reason."""
        assert invalid_reason(entry("a", logprobs=5, stop_token_ids=[0, VOCAB - 1]), VOCAB) is None


class TestIsolation:
    def test_poison_fails_alone(self, tiny_main, runner):
        """The poison sequence is reported failed; its neighbours get the same outcome as in a clean batch."""
        clean = VerifierRunner(tiny_main, 4, 64).step(wire.VerifyStep(round=1, seqs=[entry("a"), entry("c")]))
        res = runner.step(wire.VerifyStep(round=1, seqs=[entry("a"), poison("b"), entry("c")]))
        assert set(res.failed) == {"b"} and "1000000000" in res.failed["b"]
        assert res.outs == clean.outs and res.lost == []
        assert runner.table.vocab_size == VOCAB and "b" not in runner.table._slots

    def test_batch_failure_is_retried_per_sequence(self, tiny_main, runner, monkeypatch):
        """When the batched pass raises because of one sequence, each is retried alone: only it fails,
        the others are committed exactly once (their next step continues from the right prefix)."""
        clean_runner = VerifierRunner(tiny_main, 4, 64)
        clean = clean_runner.step(wire.VerifyStep(round=1, seqs=[entry("a"), entry("c")]))
        accept = VerifierRunner._draw

        def flaky(self, s, tree, lg):
            if s.seq_id == "b":
                raise RuntimeError("device assert")
            return accept(self, s, tree, lg)
        monkeypatch.setattr(VerifierRunner, "_draw", flaky)
        res = runner.step(wire.VerifyStep(round=1, seqs=[entry("a"), entry("b"), entry("c")]))
        assert set(res.failed) == {"b"} and "device assert" in res.failed["b"]
        assert res.outs == clean.outs
        for sid in ("a", "c"):
            slot, ref = runner.table.slot(sid), clean_runner.table.slot(sid)
            assert runner.cache.lengths[slot] == clean_runner.cache.lengths[ref]
