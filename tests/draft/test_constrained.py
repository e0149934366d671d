"""Grammar-constrained tree expansion: only allowed children, forced tokens with probability 1."""

from __future__ import annotations

import json

import llguidance
import numpy as np
import torch

from common import wire
from common.modeling.grammar import GrammarMasks
from common.tree import ROOT
from services.draft.constrained import constrained_children
from services.draft.policy import TreeBuilder, TreeShape
from tests.common.modeling.test_grammar import VOCAB, EOS, byte_tokenizer


def seq(grammar: str) -> wire.DraftSeq:
    return wire.DraftSeq(seq_id="s", prefix_len=0, new_tokens=[1], tree_size=8, max_depth=3, grammar=grammar, output=[])


class TestConstrainedChildren:
    def test_forced_token_added_even_outside_the_draft_head(self):
        """A forced "{" becomes the only child, log-probability 0, though the reduced head lacks it."""
        masks = GrammarMasks(byte_tokenizer(), VOCAB, [EOS])
        grammar = llguidance.grammar_from("json_schema", json.dumps({"type": "object"}))
        b = TreeBuilder(TreeShape(8, 3))
        head = torch.arange(100)  # ord("{") = 123 is not in it
        constrained_children(masks, head, b, seq(grammar), [ROOT], torch.zeros(1, 100), 4)
        assert b.tokens == [ord("{")] and b.scores == [0.0]

    def test_children_are_the_likeliest_allowed_tokens(self):
        """With a choice grammar, children are the allowed tokens ranked by draft logits, never others."""
        masks = GrammarMasks(byte_tokenizer(), VOCAB, [EOS])
        grammar = llguidance.grammar_from("choice", json.dumps(["a", "b", "c"]))
        logits = torch.zeros(1, VOCAB)
        logits[0, ord("z")] = 50.0  # the draft's favourite is not allowed
        logits[0, ord("b")], logits[0, ord("c")] = 2.0, 1.0
        b = TreeBuilder(TreeShape(8, 3))
        constrained_children(masks, None, b, seq(grammar), [ROOT], logits, 2)
        assert b.tokens == [ord("b"), ord("c")]
        probs = np.exp(b.scores)
        assert np.isclose(probs[0], np.exp(2) / (np.exp(2) + np.exp(1) + 1), atol=1e-4)


SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}
LAYOUT = {"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", "}


class TestFastForward:
    def test_forced_text_is_one_chain_without_a_level(self):
        """With fast-forward, the forced '{"ok": ' goes in as one chain of probability-1 nodes;
        only its last node is expanded next and no drafted level is used up."""
        masks = GrammarMasks(byte_tokenizer(), VOCAB, [EOS])
        grammar = llguidance.grammar_from("json_schema", json.dumps({**SCHEMA, "x-guidance": LAYOUT}))
        b = TreeBuilder(TreeShape(16, 3))
        constrained_children(masks, None, b, seq(grammar), [ROOT], torch.zeros(1, VOCAB), 4, fast_forward=True)
        assert bytes(b.tokens) == b'{"ok": ' and b.parents == [ROOT, 0, 1, 2, 3, 4, 5]
        assert b.scores == [0.0] * 7 and b.next_frontier() == [6] and b.levels == 1

    def test_chain_respects_the_tree_size(self):
        """A chain never takes more nodes than the tree's size."""
        masks = GrammarMasks(byte_tokenizer(), VOCAB, [EOS])
        grammar = llguidance.grammar_from("json_schema", json.dumps({**SCHEMA, "x-guidance": LAYOUT}))
        b = TreeBuilder(TreeShape(3, 3))
        constrained_children(masks, None, b, seq(grammar), [ROOT], torch.zeros(1, VOCAB), 4, fast_forward=True)
        assert bytes(b.tokens) == b'{"o'

    def test_off_adds_one_forced_token(self):
        """Without fast-forward, only the single forced token is added (one level per token)."""
        masks = GrammarMasks(byte_tokenizer(), VOCAB, [EOS])
        grammar = llguidance.grammar_from("json_schema", json.dumps({**SCHEMA, "x-guidance": LAYOUT}))
        b = TreeBuilder(TreeShape(16, 3))
        constrained_children(masks, None, b, seq(grammar), [ROOT], torch.zeros(1, VOCAB), 4, fast_forward=False)
        assert b.tokens == [ord("{")]
