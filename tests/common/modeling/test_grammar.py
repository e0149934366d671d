"""Grammar-constrained tree decoding on tiny random models with a byte-level tokenizer.

Token i < 256 is byte i and 256 is EOS, so llguidance can read the tiny models' output.
Greedy constrained speculation must equal constrained plain decoding token for token and
produce text the grammar accepts; sampled constrained output must follow the masked,
renormalised main-model distribution.
"""

from __future__ import annotations

import json

import llguidance
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from common import wire
from common.config import Config
from common.modeling.grammar import GrammarMasks, forced_token, unpack
from common.modeling.sampling import probs_from_logits
from common.modeling.runner import forward_segments
from services.draft.runner import DraftRunner
from services.scheduler.core import SchedulerCore
from services.scheduler.local import LocalEngine
from services.verifier.runner import VerifierRunner

VOCAB = 151936  # the tiny models' vocabulary size
EOS = 256
MAX_LEN = 256
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 22, 333]}},
          "required": ["ok", "n"], "additionalProperties": False}
LAYOUT = {"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", "}  # as the gateway sends
PROMPTS = [[1, 2, 3], [17, 4, 950, 33, 8], list(range(300, 320))]


def byte_tokenizer() -> llguidance.LLTokenizer:
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet(), key=lambda c: bytes(c, "utf-8"))
    byte_of = {c: b for b, c in enumerate(_bytes_to_unicode())}
    vocab = {c: byte_of[c] for c in alphabet}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<eos>"])
    return llguidance.LLTokenizer(tok.to_str(), n_vocab=VOCAB, eos_token=EOS)


def _bytes_to_unicode() -> list[str]:
    """GPT-2's byte -> printable character table, indexed by byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


@pytest.fixture(scope="module")
def lltok():
    return byte_tokenizer()


def grammar_of(schema: dict) -> str:
    return llguidance.grammar_from("json_schema", json.dumps({**schema, "x-guidance": LAYOUT}))


def engine(main, draft, lltok, tree_size: int, depth: int, slots: int = 4, fast_forward: bool = True):
    core = SchedulerCore(slots, 512, 200, {EOS})
    masks = GrammarMasks(lltok, VOCAB, [EOS])
    drafter = DraftRunner(draft, slots, MAX_LEN, grammar=masks.sibling(),
                          fast_forward=fast_forward) if draft is not None else None
    cfg = Config(tree_size=tree_size if drafter is not None else 0, max_accept_length=max(depth, 1), max_model_len=200)
    return LocalEngine(cfg, core, VerifierRunner(main, slots, MAX_LEN, masks), drafter)


def run(eng, requests: dict) -> dict:
    for rid, (prompt, params) in requests.items():
        eng.submit(rid, prompt, params)
    out, done = {rid: [] for rid in requests}, set()
    while len(done) < len(requests):
        for d in eng.step():
            out[d.request_id] += d.tokens
            done |= {d.request_id} if d.finish is not None else set()
    return out


class TestMasks:
    def test_row_masks_follow_the_path(self, lltok):
        """Row 0 allows only "{"; after "{\"" only the first key (llguidance keeps schema order); a refused path allows EOS only."""
        masks = GrammarMasks(lltok, VOCAB, [EOS])
        m = masks.matcher("s", grammar_of(SCHEMA), [])
        tokens = np.array(list(b'{"') + [ord("x")], np.int64)
        parents = np.array([-1, 0, -1], np.int32)
        allowed = masks.row_masks(m, tokens, parents)
        assert allowed[0].nonzero().flatten().tolist() == [ord("{")]
        assert allowed[2].nonzero().flatten().tolist() == [ord("o")]
        assert allowed[3].nonzero().flatten().tolist() == [EOS]

    def test_unpack_bit_order(self):
        """Bit j of word w is token 32 w + j; a row with one bit set is a forced token."""
        words = np.array([[1 << 3, -2**31]], np.int32)
        assert unpack(words, 64)[0].nonzero().flatten().tolist() == [3, 63]
        assert forced_token(np.array([0, -2**31], np.int32)) == 63 and forced_token(words[0]) is None


class TestGreedyConstrained:
    def test_speculative_equals_plain_and_matches_schema(self, tiny_main, tiny_noisy_draft, lltok):
        """Greedy constrained tree decoding == constrained plain decoding, and the text validates."""
        import jsonschema
        params = wire.SamplingParams(max_tokens=60, grammar=grammar_of(SCHEMA))
        reqs = {f"r{i}": (p, params) for i, p in enumerate(PROMPTS)}
        plain = run(engine(tiny_main, None, lltok, 0, 1), reqs)
        spec = run(engine(tiny_main, tiny_noisy_draft, lltok, 8, 4), reqs)
        assert spec == plain
        for toks in plain.values():
            assert toks[-1] == EOS
            jsonschema.validate(json.loads(bytes(toks[:-1])), SCHEMA)

    def test_fast_forward_changes_no_token_and_saves_steps(self, tiny_main, tiny_noisy_draft, lltok):
        """Forced-text insertion on vs off: identical greedy tokens, and no more verification
        steps with it on (forced text is always accepted and takes no drafted level)."""
        params = wire.SamplingParams(max_tokens=60, grammar=grammar_of(SCHEMA))
        reqs = {f"r{i}": (p, params) for i, p in enumerate(PROMPTS)}
        on, off = engine(tiny_main, tiny_noisy_draft, lltok, 8, 2), engine(tiny_main, tiny_noisy_draft, lltok, 8, 2,
                                                                           fast_forward=False)
        assert run(on, reqs) == run(off, reqs)
        assert sum(on.stats.committed) == sum(off.stats.committed)
        assert len(on.stats.committed) < len(off.stats.committed)


class TestSampledConstrained:
    def test_first_token_follows_masked_distribution(self, tiny_main, tiny_noisy_draft, lltok):
        """Sampled with a choice grammar, the first token's frequencies match the main model's
        distribution masked to the allowed tokens and renormalised (chi-square, p = 0.001)."""
        prompt, temp, n = [5, 6, 7], 2.0, 160
        cache = tiny_main.new_cache(1, MAX_LEN)
        h = forward_segments(tiny_main, cache, [cache.allocate()], [prompt], [np.zeros(0, np.int64)],
                             [np.zeros(0, np.int32)])[0]
        probs = probs_from_logits(tiny_main.logits(h[-1:]), temp)[0]
        letters = list(range(ord("a"), ord("z") + 1))
        ids = sorted(letters, key=lambda t: -float(probs[t]))[:4]  # the 4 likeliest letters: no tiny cells
        expected = (probs[ids] / probs[ids].sum()).numpy()
        grammar = llguidance.grammar_from("choice", json.dumps([chr(t) for t in ids]))
        reqs = {f"s{i}": (prompt, wire.SamplingParams(max_tokens=1, temperature=temp, seed=i, grammar=grammar))
                for i in range(n)}
        out = run(engine(tiny_main, tiny_noisy_draft, lltok, 3, 1, slots=16), reqs)
        counts = np.array([sum(o[0] == t for o in out.values()) for t in ids])
        assert counts.sum() == n and n * expected.min() >= 5
        chi2 = float((((counts - n * expected) ** 2) / (n * expected)).sum())
        assert chi2 < 16.27, (counts, expected)  # 3 degrees of freedom
