"""Tests for the round's tree planning (services/scheduler/planning.py), on hand-built sequences."""

from __future__ import annotations

from common import wire
from common.config import Config
from common.tree import TokenTree
from services.scheduler.core import Sequence
from services.scheduler.planning import Planner, Round, capped_shape
from services.scheduler.tree_policy import TreePolicy

PARAMS = wire.SamplingParams(max_tokens=32, ignore_eos=True)


class NullLog:
    def __getattr__(self, name):
        return lambda *a, **k: None


def planner() -> Planner:
    cfg = Config(tree_size=4, max_accept_length=4, max_model_len=160)
    return Planner(cfg, NullLog(), TreePolicy(cfg))


def seq(rid: str, verified: int, drafted: int, output: int = 2) -> Sequence:
    """A sequence with a 6-token prompt and ``output`` tokens, ``verified`` / ``drafted`` of which
    its verifier / draft holds in KV."""
    s = Sequence(request_id=rid, prompt=[5, 6, 7, 8, 9, 10], params=PARAMS, eos_ids=frozenset(), seed=0,
                 output=[11, 12, 13][:output])
    s.verifier.held, s.draft.held = verified, drafted
    return s


def new_round(seqs: list[Sequence]) -> Round:
    return Round(number=1, phase=wire.Role.DRAFT, deadline=0.0, seq_ids=[s.request_id for s in seqs],
                 draft_held={s.request_id: s.draft.held for s in seqs})


class TestPrefillFirst:
    def test_a_new_prompt_gets_a_round_of_its_own_while_others_speculate(self):
        """A sequence whose verifier holds nothing is split off into its own round when a running one speculates."""
        new, old = seq("new", 0, 0, output=0), seq("old", 8, 8)
        assert planner().prefill_first([old, new]) == [new]

    def test_after_a_plain_round_new_prompts_share_the_round(self):
        """When the latest round decoded plainly (shape size 0) a new prompt joins the others' round."""
        p = planner()
        p.shape = (0, 0)
        assert p.prefill_first([seq("old", 8, 8), seq("new", 0, 0, output=0)]) == []


class TestDraftShapes:
    def test_the_least_behind_sequence_drafts_the_explore_tree(self):
        """On an explore round the speculating sequence with the smallest draft backlog drafts the
        explore shape and is the round's explorer; guessed and prefilling sequences do not draft."""
        p = planner()
        p.policy.explore_shape = (8, 4)
        behind, level = seq("behind", 8, 5), seq("level", 8, 7)
        guessed, prefill = seq("guessed", 8, 8), seq("prefill", 0, 0, output=0)
        rnd = new_round([behind, level, guessed, prefill])
        rnd.trees["guessed"] = wire.tree_to_wire(TokenTree.empty())
        rnd.prefill.add("prefill")
        shapes = p.draft_shapes([behind, level, guessed, prefill], rnd, (4, 2))
        assert shapes == {"behind": (4, 2), "level": (8, 4)} and rnd.explorer == "level"

    def test_in_a_prefill_round_a_lagging_draft_waits_for_the_next_round(self):
        """While new prompts prefill, a running sequence whose draft lags more than one round's tokens
        (the round's depth + 1) decodes plainly (deferred) so its catch-up does not delay their first
        token; one that lags no more drafts, and without a prefill in the round the lagging one drafts too."""
        p = planner()  # a round of depth 2 appends up to 3 tokens
        lagging, close, new = seq("lagging", 8, 4), seq("close", 8, 5), seq("new", 0, 0, output=0)
        rnd = new_round([lagging, close, new])
        rnd.prefill.add("new")
        assert p.draft_shapes([lagging, close, new], rnd, (4, 2)) == {"close": (4, 2)}
        assert rnd.deferred == {"lagging"}
        rnd = new_round([lagging, close])
        assert p.draft_shapes([lagging, close], rnd, (4, 2)) == {"lagging": (4, 2), "close": (4, 2)}
        assert rnd.deferred == set()


def near_end(rid: str, left: int) -> Sequence:
    """A running sequence (draft and verifier level) that may still commit ``left`` tokens."""
    s = seq(rid, 8, 8)
    s.params = wire.SamplingParams(max_tokens=len(s.output) + left, ignore_eos=True)
    return s


def chain(n: int) -> wire.Tree:
    """An n-node chain (depths 1..n) on the wire."""
    return wire.tree_to_wire(TokenTree.build(list(range(20, 20 + n)), list(range(-1, n - 1))))


class TestCatchUp:
    def test_a_draft_lag_beyond_the_latest_shapes_round_is_a_backlog(self):
        """The backlog a tree round must first prefill counts every token a draft lags beyond what one
        round of the latest shape appends (depth + 1; 1 after plain rounds), not beyond the budget's max
        depth: three plain rounds after a 1-node tree leave a catch-up, one 1-node round does not."""
        p = planner()
        after_tree, after_plain = seq("a", 8, 6), seq("b", 8, 4)  # drafts 2 and 4 tokens behind
        p.shape = (1, 1)
        assert p._catch_up([after_tree])[0] == 0
        assert p._catch_up([after_plain])[0] == 2
        p.shape = (0, 0)
        assert p._catch_up([after_tree, after_plain])[0] == 1 + 3


class TestTokenBudget:
    def test_capped_shape_keeps_levels_that_can_commit(self):
        """A shape is cut to the levels a sequence can still commit (its node budget kept), unchanged when
        it fits, and (0, 0) when no level can commit."""
        assert capped_shape((8, 4), 4) == (8, 4) and capped_shape((8, 4), 9) == (8, 4)
        assert capped_shape((8, 4), 2) == (8, 2) and capped_shape((3, 3), 1) == (3, 1)
        assert capped_shape((1, 1), 0) == (0, 0) and capped_shape((8, 4), -1) == (0, 0)

    def test_a_sequence_near_max_tokens_drafts_only_what_it_can_commit(self):
        """With one token left a sequence drafts nothing (deferred, not degraded); with two left it drafts
        a depth-1 tree (capped); the explore tree goes to a sequence with room for all of it."""
        p = planner()
        p.policy.explore_shape = (8, 4)
        last, two, room, roomy = near_end("last", 1), near_end("two", 2), near_end("room", 20), near_end("roomy", 20)
        room.draft.held = 7  # behind roomy, ahead of the others... which cannot take the explore anyway
        last.draft.held = two.draft.held = 8
        rnd = new_round([last, two, room, roomy])
        shapes = p.draft_shapes([last, two, room, roomy], rnd, (4, 2))
        assert shapes == {"two": (4, 1), "room": (4, 2), "roomy": (8, 4)} and rnd.explorer == "roomy"
        assert rnd.deferred == {"last"} and rnd.capped == {"two"}

    def test_without_room_for_the_explore_tree_the_roomiest_sequence_explores_a_capped_one(self):
        """When no sequence can commit the whole explore tree, the one with the most tokens left drafts it
        cut to its depth_left, if that is still deeper than the round's shape; otherwise nobody explores."""
        p = planner()
        p.policy.explore_shape = (8, 4)
        short, shorter = near_end("short", 4), near_end("shorter", 3)
        rnd = new_round([short, shorter])
        assert p.draft_shapes([short, shorter], rnd, (2, 1)) == {"short": (8, 3), "shorter": (2, 1)}
        assert rnd.explorer == "short"
        rnd = new_round([short, shorter])
        assert p.draft_shapes([short, shorter], rnd, (4, 3)) == {"short": (4, 3), "shorter": (4, 2)}
        assert rnd.explorer is None and rnd.capped == {"shorter"}

    def test_trees_deeper_than_the_budget_are_cut_before_verification(self):
        """graft_lookup first cuts each tree (e.g. a look-ahead guess drafted at the round's shape) to its
        sequence's depth_left, drops a tree with nothing left, and a cut tree feeds no draft fit."""
        p = planner()
        two, last, room = near_end("two", 2), near_end("last", 1), near_end("room", 20)
        rnd = new_round([two, last, room])
        rnd.trees = {"two": chain(4), "last": chain(3), "room": chain(4)}
        p.graft_lookup(rnd, [two, last, room], waiting=False)
        assert {k: wire.tree_from_wire(t).tokens.tolist() for k, t in rnd.trees.items()} == {
            "two": [20], "room": [20, 21, 22, 23]}
        assert rnd.capped == {"two", "last"}
        rnd.outs = {sid: wire.VerifyOut(accepted=[0], bonus=9) for sid in ("two", "room")}
        one = TokenTree.build([20], [-1])
        assert p.observe_tree(rnd, two, one) is None and p.observe_tree(rnd, room, one) == (room.fit, 1)


class RecordingLog:
    def __init__(self):
        self.events = []

    def info(self, event, **kw):
        self.events.append((event, kw))


class TestShapeLog:
    def test_an_explore_is_logged_only_when_a_sequence_drafts_it(self):
        """A cold batch of requests that do not speculate logs no explore (one line every round, before),
        while a round whose speculating sequence drafts the explore tree logs it once."""
        log = RecordingLog()
        cfg = Config(tree_size=4, max_accept_length=4, max_model_len=160)
        p = Planner(cfg, log, TreePolicy(cfg))
        p.policy.explore_shape = (8, 4)
        plain = seq("plain", 8, 8)
        plain.params = wire.SamplingParams(max_tokens=32, ignore_eos=True, speculate=False)
        p.draft_shapes([plain], new_round([plain]), (0, 0))
        assert log.events == []
        spec = seq("spec", 8, 8)
        p.draft_shapes([plain, spec], new_round([plain, spec]), (0, 0))
        assert [(e, kw["explore"], kw["tree_size"]) for e, kw in log.events] == [("tree shape", (8, 4), 0)]

    def test_a_round_that_changes_shape_and_explores_logs_one_line(self):
        """choose() changing the shape and draft_shapes() drafting an explore in the same round log one
        "tree shape" line naming both; the next round at the same shape, without an explore, logs none."""
        log = RecordingLog()
        cfg = Config(tree_size=4, max_accept_length=4, max_model_len=160)
        p = Planner(cfg, log, TreePolicy(cfg))
        spec = seq("spec", 8, 8)
        p.shape = (-1, -1)  # whatever choose() picks is a change
        shape = p.choose([spec], waiting=False)
        p.policy.explore_shape = (8, 4)
        p.draft_shapes([spec], new_round([spec]), shape)
        assert [(kw["tree_size"], kw["max_depth"], kw["explore"]) for _, kw in log.events] == [(*shape, (8, 4))]
        p.policy.explore_shape = None
        p.draft_shapes([spec], new_round([spec]), p.choose([spec], waiting=False))
        assert len(log.events) == 1


class TestObserveTree:
    def test_only_non_explore_draft_trees_feed_the_draft_fit(self):
        """observe_tree returns (fit, draft tokens accepted) for a draft-model tree, and None for the
        explore tree and for a tree that had no draft-model part."""
        p = planner()
        a, b, c = seq("a", 8, 8), seq("b", 8, 8), seq("c", 8, 8)
        rnd = new_round([a, b, c])
        rnd.drafted, rnd.explorer = {"a", "b"}, "b"
        tree = TokenTree.build([1], [-1])
        rnd.outs = {sid: wire.VerifyOut(accepted=[0], bonus=9) for sid in ("a", "b", "c")}
        got = [p.observe_tree(rnd, s, tree) for s in (a, b, c)]
        assert got == [(a.fit, 1), None, None]
