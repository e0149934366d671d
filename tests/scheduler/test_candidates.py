"""Prompt-lookup candidates in the round's token tree: the graft, the per-source bookkeeping,
and lossless decoding of mixed (draft model + lookup) trees on tiny random models (fp32).

A tiny random model does not copy from its context the way real LMs do, so the lossless
tests also use ``echo_main``: tiny-random:0 with its LM head tied to the embedding, a unit
final norm and its layers' output projections damped, a model that mostly repeats its
last token and sometimes jumps (lookup candidates get accepted and rejected).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from common import wire
from common.config import Config
from common.tree import ROOT, TokenTree, children
from services.draft.runner import DraftRunner
from services.scheduler import candidates
from services.scheduler.core import SchedulerCore
from services.scheduler.local import DRAFT, LocalEngine
from services.scheduler.tree_policy import TreePolicy
from services.verifier.runner import VerifierRunner
from tests.scheduler.test_local import _exact_tokens, assert_follows, run_all

EOS = 151645
MAX_LEN = 320  # KV rows per slot
MAX_MODEL_LEN = 200
ECHO_SCALE = 0.2  # output projections damped to this: the residual (current token) dominates
BASE = [17, 4, 950, 33, 8, 21, 77, 5000, 42]
REPEAT = BASE + [600, 601, 602] + BASE  # a prompt built to repeat: its last n-grams occurred before
# A token the echo model repeats after itself only about 60% of the time (top_k 5); COPY ends
# in it and holds an earlier copy of its last 4-gram followed by it: lookup proposes it (then 600).
COPY_TOKEN = 105980
COPY = BASE + [COPY_TOKEN, COPY_TOKEN, 600] + BASE + [COPY_TOKEN]
GREEDY = wire.SamplingParams(max_tokens=40, ignore_eos=True)


@pytest.fixture(scope="module")
def echo_main():
    """A repetition-prone main model (module docstring)."""
    from common.modeling.loader import load_weights
    from common.modeling.model import DecoderModel
    spec, w, _ = load_weights("tiny-random:0", "float32")
    w = {k: v * ECHO_SCALE if k.endswith((".o.weight", ".down.weight")) else v for k, v in w.items()}
    w["lm_head"], w["norm"] = w["embed"], torch.ones_like(w["norm"])
    return DecoderModel(spec, w, torch.float32)


def engine(main, draft, tree_size: int, depth: int = 4, lookup: bool = True, slots: int = 4,
           overlap: str = "off", degraded: bool = False, first: bool = False) -> LocalEngine:
    """The in-process engine; ``degraded``: the draft worker is gone (lookup-only trees);
    ``first``: speculate in the first round too (``speculate_first_token``)."""
    cfg = Config(tree_size=tree_size, max_accept_length=depth, overlap=overlap, max_model_len=MAX_MODEL_LEN,
                 prompt_lookup=lookup, prompt_lookup_min_ngram=1, speculate_first_token=first)
    eng = LocalEngine(cfg, SchedulerCore(slots, 256, MAX_MODEL_LEN, {EOS}), VerifierRunner(main, slots, MAX_LEN),
                      DraftRunner(draft, slots, MAX_LEN) if draft is not None else None)
    if degraded:
        eng.driver.had_draft = True  # a draft joined once and is gone now: rounds without a draft tree
        eng.workers.drop(DRAFT.hex())
    return eng


def wire_tree(tokens, parents) -> wire.Tree:
    return wire.tree_to_wire(TokenTree.build(tokens, parents, -0.1 * np.arange(1, len(tokens) + 1)))


class TestGraftLookup:
    CFG = Config(prompt_lookup_max_ngram=2, prompt_lookup_min_ngram=1, prompt_lookup_num_tokens=4)

    def test_merges_into_the_draft_tree(self):
        """History 5 6 7 8 9 1 5 6: the chain 7 8 9 1 runs through the draft's root child 7
        and adds 8, 9, 1 below it; the draft's nodes keep their indices."""
        draft = wire_tree([7, 3], [ROOT, ROOT])
        got, info = candidates.graft_lookup([5, 6, 7, 8, 9, 1, 5, 6], draft, self.CFG, nodes=8, max_depth=6,
                                            step_logprob=-0.5)
        tree = wire.tree_from_wire(got)
        assert tree.tokens.tolist() == [7, 3, 8, 9, 1] and tree.parents.tolist() == [ROOT, ROOT, 0, 2, 3]
        assert info.draft_nodes == 2 and info.chain_nodes == {0, 2, 3, 4}
        assert all(len({int(tree.tokens[c]) for c in k}) == len(k) for k in children(tree.parents))

    def test_without_a_draft_tree_and_without_a_match(self):
        """With no draft tree the chain is the tree; with no earlier n-gram, or no node
        budget, nothing is grafted."""
        got, info = candidates.graft_lookup([5, 6, 7, 5, 6], None, self.CFG, nodes=8, max_depth=6, step_logprob=0.0)
        assert wire.tree_from_wire(got).tokens.tolist() == [7, 5, 6] and info.draft_nodes == 0
        assert candidates.graft_lookup([1, 2, 3], None, self.CFG, 8, 6, 0.0) is None
        assert candidates.graft_lookup([5, 6, 7, 5, 6], None, self.CFG, 0, 6, 0.0) is None

    def test_depth_and_node_budget(self):
        """The chain stops at max_depth and after ``nodes`` new nodes."""
        got, _ = candidates.graft_lookup([5, 6, 7, 8, 9, 5, 6], None, self.CFG, nodes=2, max_depth=6,
                                         step_logprob=0.0)
        assert wire.tree_from_wire(got).tokens.tolist() == [7, 8]
        got, _ = candidates.graft_lookup([5, 6, 7, 8, 9, 5, 6], None, self.CFG, nodes=8, max_depth=1,
                                         step_logprob=0.0)
        assert wire.tree_from_wire(got).tokens.tolist() == [7]


class TestObserve:
    def test_splits_acceptance_by_source(self):
        """A path accepted through draft node 0 into lookup nodes 2, 3 counts one accepted
        token for the draft table (its tree alone) and two gained by lookup."""
        policy = TreePolicy(Config(tree_size=4, max_accept_length=4))
        tree = TokenTree.build([7, 3, 8, 9], [ROOT, ROOT, 0, 2], [-0.1, -0.2, -0.8, -1.6])
        info = candidates.Grafted(draft_nodes=2, chain_nodes=frozenset({0, 2, 3}))
        candidates.observe(policy, tree, [0, 2, 3], info)
        lk = policy.lookup
        assert (lk.proposed, lk.accepted) == (3, 3)
        assert lk.added == 2 and lk.gained == 2 and lk.accept_rate() == pytest.approx(1.0)
        assert policy.table.expected(0, 1) == pytest.approx(1.0)  # the 1-node draft tree: node 0 accepted

    def test_rejected_lookup(self):
        """Lookup nodes the main model refused lower the measured lookup acceptance."""
        policy = TreePolicy(Config(tree_size=4, max_accept_length=4))
        tree = TokenTree.build([7, 8], [ROOT, 0], [-0.5, -1.0])
        info = candidates.Grafted(draft_nodes=0, chain_nodes=frozenset({0, 1}))
        for _ in range(4):
            candidates.observe(policy, tree, [], info)
        assert policy.lookup.accepted == 0 and policy.lookup.proposed == 8
        assert policy.lookup.accept_rate() < 0.1

    def test_an_offered_round_without_a_match_counts_zero_added(self):
        """A sequence-round where lookup could graft but found nothing counts as 0 nodes added, so
        the mean added per sequence predicts a batch's extra verify rows; not offered, nothing counts."""
        policy = TreePolicy(Config(tree_size=4, max_accept_length=4))
        info = candidates.Grafted(draft_nodes=0, chain_nodes=frozenset({0, 1}))
        candidates.observe(policy, TokenTree.build([7, 8], [ROOT, 0], [-0.5, -1.0]), [0], info)
        candidates.observe(policy, TokenTree.empty(), [], None, offered=False)
        assert policy.lookup.added / policy.lookup.weight == pytest.approx(2.0)
        candidates.observe(policy, TokenTree.empty(), [], None, offered=True)
        assert policy.lookup.added / policy.lookup.weight == pytest.approx(1.0, rel=0.02)
        assert policy.lookup.accept_rate() == pytest.approx(0.5)


@pytest.fixture
def mixed_hits(monkeypatch) -> list[bool]:
    """Per verified tree holding both draft-model and lookup nodes: whether a lookup node
    (beyond the draft tree) was accepted; filled as the engine runs."""
    hits, observe = [], candidates.observe

    def spy(policy, tree, accepted, info, offered=False, seq=None, own=None):
        if info is not None and info.draft_nodes > 0:
            hits.append(any(a >= info.draft_nodes for a in accepted))
        return observe(policy, tree, accepted, info, offered, seq, own)

    monkeypatch.setattr(candidates, "observe", spy)
    return hits


@pytest.fixture(scope="module")
def plain(echo_main):
    """Plain greedy decoding (tree_size 0: no draft, no lookup) of each prompt."""
    eng = engine(echo_main, None, 0, 1)
    return {name: eng.timed_generate(name, p, GREEDY)[0] for name, p in (("repeat", REPEAT), ("base", BASE))}


class TestGreedyLossless:
    @pytest.mark.parametrize("tree_size,depth", [(4, 2), (16, 6)])
    def test_mixed_trees_equal_plain(self, echo_main, tiny_noisy_draft, plain, mixed_hits, tree_size, depth):
        """With draft-model and lookup candidates in one tree, greedy output equals plain
        decoding on a prompt built to repeat, and lookup nodes of such mixed trees were accepted."""
        eng = engine(echo_main, tiny_noisy_draft, tree_size, depth)
        out = run_all(eng, {"repeat": (REPEAT, GREEDY), "base": (BASE, GREEDY)})
        assert out == plain
        assert eng.policy.lookup.accepted > 0 and eng.policy.lookup.proposed > eng.policy.lookup.accepted
        assert any(mixed_hits)

    def test_lookup_only_rounds_equal_plain(self, echo_main, tiny_noisy_draft, plain):
        """Without a draft worker (degraded) lookup alone fills the trees: same output, fewer
        verification steps than tokens."""
        eng = engine(echo_main, tiny_noisy_draft, 8, 6, degraded=True)
        out, _, committed = eng.timed_generate("repeat", REPEAT, GREEDY)
        assert out == plain["repeat"]
        assert eng.policy.lookup.accepted > 0 and len(committed) < len(out)

    def test_with_overlap(self, echo_main, tiny_noisy_draft, plain):
        """Draft/verify overlap (look-ahead trees planned from mixed trees) gives the same output."""
        eng = engine(echo_main, tiny_noisy_draft, 8, 4, overlap="on")
        assert run_all(eng, {"repeat": (REPEAT, GREEDY), "base": (BASE, GREEDY)}) == plain

    def test_lookup_off(self, echo_main, tiny_noisy_draft, plain):
        """With prompt_lookup off nothing is proposed by lookup and the output is the same."""
        eng = engine(echo_main, tiny_noisy_draft, 8, 4, lookup=False)
        assert run_all(eng, {"repeat": (REPEAT, GREEDY), "base": (BASE, GREEDY)}) == plain
        assert eng.policy.lookup.proposed == 0

    def test_real_draft_on_plain_model(self, tiny_main, tiny_noisy_draft):
        """With the ordinary tiny main model (which rarely copies) lookup proposes tokens,
        the draft tree still gets accepted, and the output equals plain decoding."""
        ref = engine(tiny_main, None, 0, 1).timed_generate("a", REPEAT, GREEDY)[0]
        eng = engine(tiny_main, tiny_noisy_draft, 16, 4)
        assert eng.timed_generate("a", REPEAT, GREEDY)[0] == ref
        assert eng.policy.lookup.proposed > 0 and eng.core.num_accepted > 0


class TestSamplingLossless:
    @pytest.mark.parametrize("first", [True, False], ids=["speculate-first-token", "prefill-round-first"])
    def test_first_two_tokens_follow_main_model(self, echo_main, tiny_noisy_draft, mixed_hits, first):
        """At temperature 1 (top_k 5), on a prompt where lookup's first candidate is a coin
        flip for the main model, the empirical distribution of the first two committed tokens
        is within twice the expected sampling noise (total variation) of the main model's
        exact one and lookup tokens were accepted and rejected; speculating in the first round,
        trees holding both draft-model and lookup nodes had lookup nodes accepted; with a
        prefill first round, lookup alone fills that round's tree."""
        n, kw = 192, {"top_k": 5}
        exact = _exact_tokens(echo_main, COPY, 2, 1.0, kw)
        first_tok = sum(q for k, q in exact.items() if k[0] == COPY_TOKEN)
        assert 0.3 < first_tok < 0.8  # the setup: lookup's candidate is accepted only sometimes
        eng = engine(echo_main, tiny_noisy_draft, 4, 2, slots=64, first=first)
        params = {i: wire.SamplingParams(max_tokens=2, temperature=1.0, seed=i, **kw) for i in range(n)}
        assert_follows(run_all(eng, {f"r{i}": (COPY, p) for i, p in params.items()}), exact)
        lk = eng.policy.lookup
        assert 0 < lk.accepted < lk.proposed
        assert any(mixed_hits) == first

    def test_seeded_text_independent_of_lookup(self, echo_main, tiny_noisy_draft):
        """A seeded sampled request gives the same tokens with plain decoding, mixed trees and
        lookup-only trees: its noise is keyed by (seed, position) only."""
        params = wire.SamplingParams(max_tokens=30, temperature=0.8, top_p=0.95, seed=7, ignore_eos=True)
        ref = engine(echo_main, None, 0, 1).timed_generate("r", REPEAT, params)[0]
        mixed = engine(echo_main, tiny_noisy_draft, 8, 4)
        alone = engine(echo_main, tiny_noisy_draft, 8, 4, degraded=True)
        assert mixed.timed_generate("r", REPEAT, params)[0] == ref
        assert alone.timed_generate("r", REPEAT, params)[0] == ref
        assert mixed.policy.lookup.accepted + alone.policy.lookup.accepted > 0 and len(set(ref)) > 1
