"""RoundDriver under faults: degraded (no draft), waiting for a verifier, a refused sequence."""

from __future__ import annotations

import dataclasses

import msgspec
import numpy as np
import pytest

from common import wire
from common.config import Config
from common.prefix_hash import block_keys
from services.scheduler.core import DRAFT_SINK_TOKENS, SchedulerCore
from services.scheduler.makespan import OFF_PATH_VALUE
from services.scheduler.planning import Planner
from services.scheduler.rounds import VERIFIER_WAIT_FACTOR, RoundDriver
from services.scheduler.tree_policy import TreePolicy
from services.scheduler.workers import WorkerRegistry

DRAFT, VERIFIER, GW = b"d", b"v", b"gw"
PARAMS = wire.SamplingParams(max_tokens=4, ignore_eos=True)


class NullLog:
    def __getattr__(self, name):
        return lambda *a, **k: None


def driver(draft: bool, verifier: bool = True, timeout_s: float = 1.0) -> RoundDriver:
    reg = WorkerRegistry(1e9)
    if draft:
        reg.hello(DRAFT, wire.Hello(role=wire.Role.DRAFT, replica="0", pid=1, slots_total=4, max_len=256), 0.0)
    if verifier:
        reg.hello(VERIFIER, wire.Hello(role=wire.Role.VERIFIER, replica="0", pid=2, slots_total=4, max_len=256), 0.0)
    cfg = Config(tree_size=4, max_accept_length=4, max_model_len=160, heartbeat_timeout_s=timeout_s)
    return RoundDriver(SchedulerCore(4, 16, 160, {99}), reg, cfg, NullLog(), 1e9)


def repeating_and_new(log_info=None) -> tuple[RoundDriver, wire.VerifyStep]:
    """A degraded driver (no draft: lookup alone fills the trees; ``log_info`` receives its info
    events) with "rep" (a prompt that repeats) and "new" (one that does not) past their prefill
    round; returns it and the next round's verify step."""
    drv = driver(draft=False)
    drv.had_draft = True
    if log_info is not None:
        drv.log = type("Log", (), {"info": log_info, "__getattr__": lambda self, name: lambda *a, **k: None})()
    drv.submit(GW, wire.Submit(request_id="rep", prompt=[5, 6, 7, 8, 5, 6, 7], params=PARAMS))
    drv.submit(GW, wire.Submit(request_id="new", prompt=[20, 21, 22, 23, 24, 25, 26], params=PARAMS))
    (_, step), = drv.start(0.0)  # the prefill round
    drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={
        "rep": wire.VerifyOut(accepted=[], bonus=8), "new": wire.VerifyOut(accepted=[], bonus=27)}), 0.0)
    (_, step), = drv.start(0.0)
    return drv, step


def deltas(outs, rid: str) -> list[wire.TokenDelta]:
    return [m for _, m in outs if isinstance(m, wire.TokenDelta) and m.request_id == rid]


class TestDegraded:
    def test_no_draft_after_one_joined_decodes_plainly_and_counts(self):
        """With no draft worker left (one had joined), requests are admitted and verified with empty
        trees; each such step is counted in plain_steps."""
        drv = driver(draft=False)
        drv.had_draft = True
        assert drv.ready() and drv.submit(GW, wire.Submit(request_id="r", prompt=[1, 2, 3], params=PARAMS)) == []
        (ident, step), = drv.start(0.0)
        assert ident == VERIFIER and isinstance(step, wire.VerifyStep)
        assert step.seqs[0].tree.tokens.shape == [0]
        out = drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={"r": wire.VerifyOut(accepted=[], bonus=7)}), 0.0)
        assert deltas(out, "r")[0].tokens == [7] and drv.plain_steps == 0  # the prefill round is plain anyway
        (_, step), = drv.start(0.0)
        out = drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={"r": wire.VerifyOut(accepted=[], bonus=8)}), 0.0)
        assert deltas(out, "r")[0].tokens == [8] and drv.plain_steps == 1


class TestCalibration:
    def test_decode_rounds_calibrate_the_policy_prefill_rounds_do_not(self):
        """A plain decode round reports its committed tokens to the tree policy's calibration and its verify ms to the verify cost; the prefill round does neither."""
        drv = driver(draft=False)
        drv.had_draft = True
        seen = []
        drv.policy.observe_round = lambda speculative, tokens, draft_ms=0.0, grafted=False, appended=None: \
            seen.append((speculative, tokens))
        drv.policy.observe_verify = lambda batch, rows, ms: seen.append((batch, rows, ms))
        drv.submit(GW, wire.Submit(request_id="r", prompt=[1, 2, 3], params=PARAMS))
        for bonus in (7, 8, 9):
            (_, step), = drv.start(0.0)
            drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, verify_ms=50.0,
                                                      outs={"r": wire.VerifyOut(accepted=[], bonus=bonus)}), 0.0)
        assert seen == [(1, 1, 50.0), (False, 1)] * 2  # two decode rounds; the prefill round is left out

    def test_a_drafted_round_reports_its_draft_ms(self):
        """A speculative round hands the policy its committed tokens, its draft worker's ms and the tokens
        its draft prefilled first (here the prompt and the first token), so the draft curve's correction
        per level is measured (``TreePolicy.draft_cost``)."""
        drv = driver(draft=True)
        seen = []
        drv.policy.observe_round = lambda speculative, tokens, draft_ms=0.0, grafted=False, appended=None: \
            seen.append((speculative, tokens, draft_ms, appended))
        drv.submit(GW, wire.Submit(request_id="r", prompt=[1, 2, 3], params=PARAMS))
        (_, step), = drv.start(0.0)
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={"r": wire.VerifyOut(accepted=[], bonus=7)}), 0.0)
        (_, draft), = drv.start(0.0)
        (_, verify), = drv.on_draft(DRAFT, wire.DraftResult(round=draft.round, trees={"r": one_node_tree()},
                                                            draft_ms=30.0), 0.0)
        drv.on_verify(VERIFIER, wire.VerifyResult(round=verify.round, verify_ms=50.0,
                                                  outs={"r": wire.VerifyOut(accepted=[0], bonus=8)}), 0.0)
        assert seen == [(True, 2, 30.0, 4)]

    def test_a_round_with_lookup_grafts_says_so(self):
        """A round whose verifier scored prompt-lookup nodes reports them (grafted) to the policy, which leaves
        such rounds out of its calibration; a round without grafts reports none."""
        drv, step = repeating_and_new()
        seen = []
        drv.policy.observe_round = lambda speculative, tokens, draft_ms=0.0, grafted=False, appended=None: \
            seen.append(grafted)
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, verify_ms=40.0, outs={
            "rep": wire.VerifyOut(accepted=[0, 1], bonus=7), "new": wire.VerifyOut(accepted=[], bonus=28)}), 0.0)
        drv.policy.lookup_nodes = lambda *a, **k: 0  # the next round grafts nothing
        (_, step), = drv.start(0.0)
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, verify_ms=40.0, outs={
            sid: wire.VerifyOut(accepted=[], bonus=9) for sid in drv.current.seq_ids}), 0.0)
        assert seen == [True, False]


class TestPathValues:
    def start_decode(self, budgets: list[int]) -> tuple[RoundDriver, dict[str, float]]:
        """A degraded driver with one request per budget (max_tokens), past their prefill round;
        returns it and the worth its next round gave each running sequence's lookup tokens."""
        drv = driver(draft=False)
        drv.had_draft = True
        for i, n in enumerate(budgets):
            drv.submit(GW, wire.Submit(request_id=f"r{i}", prompt=[5, 6, 7, 8, 5, 6, 7], params=wire.SamplingParams(
                max_tokens=n, ignore_eos=True)))
        (_, step), = drv.start(0.0)
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={
            e.seq_id: wire.VerifyOut(accepted=[], bonus=8) for e in step.seqs}), 0.0)
        values = []

        def lookup_nodes(batch, size, depth, seq, value=1.0):  # records the worth, grafts nothing
            values.append(value)
            return 0
        drv.policy.lookup_nodes = lookup_nodes
        drv.start(0.0)
        return drv, dict(zip(drv.current.seq_ids, values))

    def test_requests_that_end_first_get_less_worth_when_nothing_waits(self):
        """With nothing queued, a request with fewer tokens left than another in the batch values its lookup tokens at OFF_PATH_VALUE; the longest one at 1."""
        _, values = self.start_decode([8, 32, 32])
        assert values == {"r0": OFF_PATH_VALUE, "r1": 1.0, "r2": 1.0}

    @staticmethod
    def rejected_and_accepted() -> RoundDriver:
        """A driver with requests "a" and "b" (max_tokens 100) past a round of one-node draft trees where
        "a"'s tree was rejected and "b"'s accepted."""
        drv = driver(draft=True)
        params = msgspec.structs.replace(PARAMS, max_tokens=100)
        for rid in ("a", "b"):
            drv.submit(GW, wire.Submit(request_id=rid, prompt=[1, 2, 3], params=params))
        (_, step), = drv.start(0.0)
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={
            sid: wire.VerifyOut(accepted=[], bonus=7) for sid in ("a", "b")}), 0.0)
        drv.policy.choose = lambda batch, backlog=0, remaining=0.0, fit=1.0, own=(): (1, 1)
        (_, draft), = drv.start(0.0)
        (_, verify), = drv.on_draft(DRAFT, wire.DraftResult(round=draft.round, trees={
            "a": one_node_tree(), "b": one_node_tree()}), 0.0)
        drv.on_verify(VERIFIER, wire.VerifyResult(round=verify.round, outs={
            "a": wire.VerifyOut(accepted=[], bonus=9), "b": wire.VerifyOut(accepted=[0], bonus=9)}), 0.0)
        return drv

    def test_the_draft_fit_of_the_critical_path_reaches_the_policy(self):
        """After a round where "a"'s one-node draft tree was rejected and "b"'s accepted, the next
        round's choice is told "a"'s fit, below 1: "a" has the most tokens left and nothing waits."""
        drv = self.rejected_and_accepted()
        a, b = drv.core.running["a"], drv.core.running["b"]
        seen = []
        drv.policy.choose = lambda batch, backlog=0, remaining=0.0, fit=1.0, own=(): seen.append(fit) or (0, 0)
        drv.start(0.0)
        assert a.fit.ratio() < 1.0 < b.fit.ratio() and seen == [a.fit.ratio()]

    def test_each_request_s_own_acceptance_reaches_the_policy(self):
        """After "a"'s one-node tree was rejected and "b"'s accepted, each request's own acceptance reading
        holds its own tree (0 and 1 accepted tokens at the 1-node cell) and the next round's choice gets both."""
        drv = self.rejected_and_accepted()
        a, b = drv.core.running["a"], drv.core.running["b"]
        seen = []
        drv.policy.choose = lambda batch, backlog=0, remaining=0.0, fit=1.0, own=(): seen.append(own) or (0, 0)
        drv.start(0.0)
        assert (a.acceptance.total[0, 1], b.acceptance.total[0, 1]) == (0.0, 1.0)
        assert [id(r) for r in seen[0]] == [id(a.acceptance), id(b.acceptance)]

    def test_a_plain_round_ages_the_fits_it_did_not_observe(self):
        """After "a"'s draft tree was rejected and "b"'s accepted, a plain round moves both fits back
        toward 1 (their texts moved on with no tree to read them)."""
        drv = self.rejected_and_accepted()
        a, b = drv.core.running["a"], drv.core.running["b"]
        before = a.fit.ratio(), b.fit.ratio()
        drv.policy.choose = lambda batch, backlog=0, remaining=0.0, fit=1.0, own=(): (0, 0)
        (_, step), = drv.start(0.0)
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={
            sid: wire.VerifyOut(accepted=[], bonus=5) for sid in ("a", "b")}), 0.0)
        assert before[0] < a.fit.ratio() < 1.0 < b.fit.ratio() < before[1]

    def test_a_waiting_request_makes_every_token_count(self):
        """While a request waits for a slot, a request that ends early frees it for that one: every sequence values its lookup tokens at 1."""
        drv, values = self.start_decode([8, 32, 32, 32, 32])
        assert drv.core.waiting and len(values) == 4 and set(values.values()) == {1.0}


class TestRoundLog:
    def test_the_round_log_counts_tree_nodes_and_lookup_grafts(self):
        """Each round's log event says how many tree nodes the verifier scored (beyond one token
        per sequence), how many sequences had prompt-lookup nodes grafted and how many each (in the
        order of ``accepted``), so a slow round in the log can be told apart from a big one."""
        events = []
        drv, step = repeating_and_new(lambda self, event, **kw: events.append((event, kw)))
        nodes = {e.seq_id: e.tree.tokens.shape[0] for e in step.seqs}
        assert nodes["rep"] > 0 and nodes["new"] == 0
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, verify_ms=40.0, outs={
            "rep": wire.VerifyOut(accepted=[0, 1], bonus=7), "new": wire.VerifyOut(accepted=[], bonus=28)}), 0.0)
        rounds = [kw for event, kw in events if event == "round"]
        assert [(r["tree_nodes"], r["lookup_grafts"], r["accepted"]) for r in rounds][-1] == (nodes["rep"], 1, [3, 1])
        lookup = rounds[-1]["lookup_nodes"]
        assert len(lookup) == 2 and 0 < lookup[0] <= nodes["rep"] and lookup[1] == 0


class TestPrefillRound:
    def test_first_token_comes_from_the_main_model_alone(self):
        """A new sequence's first round goes to the verifier with an empty tree (the draft's
        prefill stays out of the time to first token); the next round's draft step carries the
        prompt and the first token, so the draft catches up."""
        drv = driver(draft=True)
        drv.submit(GW, wire.Submit(request_id="r", prompt=[1, 2, 3], params=PARAMS))
        (ident, step), = drv.start(0.0)
        assert ident == VERIFIER and step.seqs[0].tree.tokens.shape == [0] and step.seqs[0].new_tokens == [1, 2, 3]
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={"r": wire.VerifyOut(accepted=[], bonus=7)}), 0.0)
        (ident, step), = drv.start(0.0)
        assert ident == DRAFT and isinstance(step, wire.DraftStep)
        assert step.seqs[0].prefix_len == 0 and step.seqs[0].new_tokens == [1, 2, 3, 7] and drv.plain_steps == 0

    def test_a_new_prompt_is_prefilled_before_the_running_sequences_draft(self):
        """A prompt arriving while another sequence speculates gets a verify-only round of its own
        (its first token does not wait for the other's draft step); the next round drafts for both."""
        drv = driver(draft=True)
        drv.submit(GW, wire.Submit(request_id="a", prompt=[1, 2, 3], params=PARAMS))
        (_, step), = drv.start(0.0)
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={"a": wire.VerifyOut(accepted=[], bonus=7)}), 0.0)
        drv.submit(GW, wire.Submit(request_id="b", prompt=[4, 5, 6, 7], params=PARAMS))
        (ident, step), = drv.start(0.0)
        assert ident == VERIFIER and [(e.seq_id, e.new_tokens) for e in step.seqs] == [("b", [4, 5, 6, 7])]
        out = drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={"b": wire.VerifyOut(accepted=[], bonus=8)}), 0.0)
        assert deltas(out, "b")[0].tokens == [8] and deltas(out, "a") == []
        (ident, step), = drv.start(0.0)
        assert ident == DRAFT and sorted(e.seq_id for e in step.seqs) == ["a", "b"]

    @pytest.mark.parametrize("off", ["tree_size 0", "request"])
    def test_new_prompts_join_the_round_while_decoding_is_plain(self, off):
        """With speculation off (tree_size 0, or for the running request) a new prompt's prefill
        shares the round with the running sequence's plain step (one forward for both)."""
        drv = driver(draft=True)
        if off == "tree_size 0":
            drv.cfg = dataclasses.replace(drv.cfg, tree_size=0)
            drv.planner = Planner(drv.cfg, drv.log, TreePolicy(drv.cfg))
        params = msgspec.structs.replace(PARAMS, speculate=off != "request")
        drv.submit(GW, wire.Submit(request_id="a", prompt=[1, 2, 3], params=params))
        (_, step), = drv.start(0.0)
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={"a": wire.VerifyOut(accepted=[], bonus=7)}), 0.0)
        drv.submit(GW, wire.Submit(request_id="b", prompt=[4, 5, 6, 7], params=PARAMS))
        (ident, step), = drv.start(0.0)
        assert ident == VERIFIER and sorted(e.seq_id for e in step.seqs) == ["a", "b"]

    def test_speculate_first_token_drafts_in_round_one(self):
        """With ``speculate_first_token`` the first round starts with a draft step."""
        drv = driver(draft=True)
        drv.cfg = dataclasses.replace(drv.cfg, speculate_first_token=True)
        drv.submit(GW, wire.Submit(request_id="r", prompt=[1, 2, 3], params=PARAMS))
        (ident, step), = drv.start(0.0)
        assert ident == DRAFT and isinstance(step, wire.DraftStep)

    def test_before_any_draft_joined_not_ready(self):
        """At start-up (no draft ever joined) the scheduler is not ready and refuses with 503."""
        drv = driver(draft=False)
        (_, rej), = drv.submit(GW, wire.Submit(request_id="r", prompt=[1], params=PARAMS))
        assert not drv.ready() and isinstance(rej, wire.Rejected) and rej.status == 503


class TestSpeculationOff:
    def test_a_request_with_speculation_off_gets_no_tree_while_its_neighbour_does(self):
        """A request submitted with ``speculate=False`` is never sent to the draft and is verified
        with an empty tree (no prompt-lookup graft either) in the same round where its batch
        neighbour gets a drafted tree; its plain steps are not counted as degraded."""
        drv = driver(draft=True)
        plain = msgspec.structs.replace(PARAMS, speculate=False)
        drv.submit(GW, wire.Submit(request_id="s", prompt=[1, 2, 3, 1, 2], params=PARAMS))
        drv.submit(GW, wire.Submit(request_id="p", prompt=[1, 2, 3, 1, 2], params=plain))
        (_, step), = drv.start(0.0)  # the prefill round: main model only
        outs = {sid: wire.VerifyOut(accepted=[], bonus=3) for sid in ("s", "p")}
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs=outs), 0.0)
        (ident, draft), = drv.start(0.0)
        assert ident == DRAFT and [e.seq_id for e in draft.seqs] == ["s"]
        (ident, verify), = drv.on_draft(DRAFT, wire.DraftResult(round=draft.round, trees={"s": one_node_tree()}), 0.0)
        shapes = {e.seq_id: e.tree.tokens.shape for e in verify.seqs}
        assert ident == VERIFIER and shapes["p"] == [0] and shapes["s"][0] >= 1
        drv.on_verify(VERIFIER, wire.VerifyResult(round=verify.round, outs=outs), 0.0)
        assert drv.plain_steps == 0


    def test_an_explore_round_gives_the_probe_tree_to_the_sequence_least_behind(self):
        """On an explore round the sequence whose draft is least behind drafts the probe tree and
        the others the round's shape: plain (not drafted, not counted as degraded) when plain is best."""
        drv = driver(draft=True)
        for rid in ("a", "b"):  # room for a depth-4 explore tree to the end
            drv.submit(GW, wire.Submit(request_id=rid, prompt=[1, 2, 3], params=msgspec.structs.replace(PARAMS, max_tokens=16)))
        (_, step), = drv.start(0.0)
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={
            sid: wire.VerifyOut(accepted=[], bonus=3) for sid in ("a", "b")}), 0.0)
        drv.core.running["a"].draft.sent(3)  # a's draft already holds its prompt: least behind

        def explore(batch, backlog=0, remaining=0.0, fit=1.0, own=()):
            drv.policy.explore_shape = (4, 2)
            return 0, 0
        drv.policy.choose = explore
        (ident, draft), = drv.start(0.0)
        assert ident == DRAFT and [(e.seq_id, e.tree_size, e.max_depth) for e in draft.seqs] == [("a", 4, 2)]
        (_, verify), = drv.on_draft(DRAFT, wire.DraftResult(round=draft.round, trees={"a": one_node_tree()}), 0.0)
        drv.on_verify(VERIFIER, wire.VerifyResult(round=verify.round, outs={
            sid: wire.VerifyOut(accepted=[], bonus=4) for sid in ("a", "b")}), 0.0)
        assert drv.plain_steps == 0
        drv.policy.choose = lambda batch, backlog=0, remaining=0.0, fit=1.0, own=(): (drv.policy.__setattr__("explore_shape", (8, 4))
                                                                     or (2, 2))
        (_, draft), = drv.start(0.0)
        assert sorted((e.seq_id, e.tree_size) for e in draft.seqs) == [("a", 8), ("b", 2)]


class TestLookupPerSequence:
    def test_each_sequence_keeps_its_own_lookup_rounds(self):
        """In one round, the sequence whose text repeats gets lookup nodes and the one whose text
        does not gets none: each records its own lookup statistics (added nodes, gains) and its
        tokens per round ms under 'grafted' or not, besides the engine-wide statistics."""
        drv, step = repeating_and_new()
        trees = {e.seq_id: e.tree.tokens.numpy().tolist() for e in step.seqs}
        assert trees["rep"][:2] == [5, 6] and trees["new"] == []  # lookup copied what followed 7, 8
        rep, new = drv.core.running["rep"].lookup, drv.core.running["new"].lookup
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, verify_ms=40.0, outs={
            "rep": wire.VerifyOut(accepted=[0, 1], bonus=7), "new": wire.VerifyOut(accepted=[], bonus=28)}), 0.0)
        # two offered rounds each (lookup rides along with the prefill round too, none accepted there)
        assert rep.stats.gained == 2 and rep.stats.weight == new.stats.weight == 1.98 and rep.stats.proposed > 0
        assert rep.stats.added > len(trees["rep"]) and new.stats.added == 0  # new: offered, nothing found
        # round ms: the decode round only (a prefill round's cost is the prompt's)
        assert rep.rates.sums == {(2, True): [3, 40.0, 1]} and new.rates.sums == {(2, False): [1, 40.0, 1]}
        assert drv.policy.lookup.weight == pytest.approx(sum(0.98 ** i for i in range(4)))  # engine-wide: all four


class TestCatchUp:
    def test_backlog_counts_draft_lag_beyond_one_round_and_tokens_left(self):
        """The policy is told how many tokens the drafts lag beyond one round's worth (speculating
        sequences past their prefill only) and the mean tokens they may still generate."""
        drv = driver(draft=True)
        params = msgspec.structs.replace(PARAMS, max_tokens=100)
        for rid, prompt in (("a", list(range(1, 31))), ("b", [1, 2, 3])):
            drv.submit(GW, wire.Submit(request_id=rid, prompt=prompt, params=params))
        (_, step), = drv.start(0.0)
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={
            sid: wire.VerifyOut(accepted=[], bonus=7) for sid in ("a", "b")}), 0.0)
        seen = []
        drv.policy.choose = lambda batch, backlog=0, remaining=0.0, fit=1.0, own=(): seen.append((batch, backlog, remaining)) or (0, 0)
        drv.start(0.0)
        per_round = drv.policy.max_depth + 1
        assert seen == [(2, max(0, 31 - per_round) + max(0, 4 - per_round), 99.0)]

    def test_tokens_left_come_from_finished_requests_lengths(self):
        """Once requests have finished, the tokens a sequence is expected to still generate are their
        mean residual length (at most its max_tokens budget), not the budget."""
        drv = driver(draft=True)
        for n in (10, 10, 10, 20):
            drv.planner.lengths.observe(n)
        params = msgspec.structs.replace(PARAMS, max_tokens=100)
        drv.submit(GW, wire.Submit(request_id="a", prompt=list(range(1, 31)), params=params))
        (_, step), = drv.start(0.0)
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={"a": wire.VerifyOut(accepted=[], bonus=7)}), 0.0)
        seen = []
        drv.policy.choose = lambda batch, backlog=0, remaining=0.0, fit=1.0, own=(): seen.append(remaining) or (0, 0)
        drv.start(0.0)
        assert seen == [(9 + 9 + 9 + 19) / 4]

    def test_finished_requests_are_learned(self):
        """A request that ends (here at max_tokens) adds its output length to what the driver learned."""
        drv = driver(draft=False)
        drv.had_draft = True  # degraded: plain steps, no draft worker needed
        drv.submit(GW, wire.Submit(request_id="a", prompt=[1, 2, 3], params=PARAMS))
        for bonus in range(5, 5 + PARAMS.max_tokens):
            (_, step), = drv.start(0.0)
            drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={"a": wire.VerifyOut(accepted=[], bonus=bonus)}), 0.0)
        assert list(drv.planner.lengths.lengths) == [PARAMS.max_tokens]

    def test_stopped_requests_are_learned_aborted_ones_are_not(self):
        """An EOS finish adds its length; a request the client aborted adds nothing (its length says nothing about answers)."""
        drv = driver(draft=False)
        drv.had_draft = True
        params = msgspec.structs.replace(PARAMS, ignore_eos=False, max_tokens=50)
        for rid in ("eos", "gone"):
            drv.submit(GW, wire.Submit(request_id=rid, prompt=[1, 2, 3], params=params))
        (_, step), = drv.start(0.0)
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={
            sid: wire.VerifyOut(accepted=[], bonus=7) for sid in ("eos", "gone")}), 0.0)
        drv.abort("gone")
        (_, step), = drv.start(0.0)
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={"eos": wire.VerifyOut(accepted=[], bonus=99)}), 0.0)
        assert list(drv.planner.lengths.lengths) == [2]

    def test_a_long_prompt_reaches_the_draft_as_sink_plus_window(self):
        """With ``draft_context_window`` set, the draft's catch-up step carries the prompt's first
        DRAFT_SINK_TOKENS and last window tokens (the backlog the policy prices counts only those),
        while the verifier got the whole prompt."""
        drv = driver(draft=True)
        drv.cfg = dataclasses.replace(drv.cfg, draft_context_window=10)
        prompt = list(range(1, 61))
        drv.submit(GW, wire.Submit(request_id="a", prompt=prompt, params=msgspec.structs.replace(PARAMS, max_tokens=100)))
        (_, step), = drv.start(0.0)
        assert step.seqs[0].new_tokens == prompt
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={"a": wire.VerifyOut(accepted=[], bonus=7)}), 0.0)
        seen, choose = [], drv.policy.choose
        drv.policy.choose = lambda batch, backlog=0, remaining=0.0, fit=1.0, own=(): seen.append(backlog) or choose(batch, backlog, remaining, fit)
        (ident, draft), = drv.start(0.0)
        view = prompt[:DRAFT_SINK_TOKENS] + prompt[-10:] + [7]
        assert ident == DRAFT and (draft.seqs[0].prefix_len, draft.seqs[0].new_tokens) == (0, view)
        assert seen == [max(0, len(view) - drv.policy.max_depth - 1)]

    def test_a_freed_windowed_draft_is_remembered_by_its_view_blocks(self):
        """Cache-aware placement records, for the draft worker, the prefix-cache blocks of what it
        held (sink + window + output), not the blocks of the whole sequence."""
        drv = driver(draft=True)
        drv.cfg = dataclasses.replace(drv.cfg, draft_context_window=16)
        prompt = list(range(1, 81))
        drv.submit(GW, wire.Submit(request_id="a", prompt=prompt, params=msgspec.structs.replace(PARAMS, max_tokens=50)))
        (_, step), = drv.start(0.0)
        drv.on_verify(VERIFIER, wire.VerifyResult(round=step.round, outs={"a": wire.VerifyOut(accepted=[], bonus=7)}), 0.0)
        drv.policy.choose = lambda batch, backlog=0, remaining=0.0, fit=1.0, own=(): (4, 2)
        (ident, _), = drv.start(0.0)
        drv.abort("a")
        index, size = drv.workers.get(DRAFT.hex()).prefix, drv.cfg.prefix_cache_block_size
        view = prompt[:DRAFT_SINK_TOKENS] + prompt[-16:] + [7]
        assert ident == DRAFT and index.match(block_keys(view, size)) == len(view) // size
        assert index.match(block_keys(prompt + [7], size)) == DRAFT_SINK_TOKENS // size  # only the sink is shared


def one_node_tree() -> wire.Tree:
    return wire.Tree(tokens=wire.Array.of(np.array([1], np.int64)), parents=wire.Array.of(np.array([-1], np.int32)),
                     scores=wire.Array.of(np.array([0.0], np.float32)))


class TestNoVerifier:
    def test_requests_wait_bounded_time_then_fail_cleanly(self):
        """When the only verifier goes, running requests wait VERIFIER_WAIT_FACTOR heartbeat timeouts for
        one to come back, then end with finish=error naming the cause."""
        drv = driver(draft=True, timeout_s=1.0)
        drv.submit(GW, wire.Submit(request_id="r", prompt=[1, 2], params=PARAMS))
        drv.core.admit()
        drv.worker_gone(drv.workers.drop(VERIFIER.hex()), 0.0, "test")
        assert drv.start(10.0) == [] and drv.start(10.0 + VERIFIER_WAIT_FACTOR - 0.5) == []
        final, = deltas(drv.start(10.0 + VERIFIER_WAIT_FACTOR + 0.5), "r")
        assert final.finish == wire.FinishReason.ERROR and "no verifier" in final.error

    def test_verifier_back_in_time_resumes(self):
        """A verifier that rejoins within the wait gets the waiting requests (re-prefilled from 0)."""
        drv = driver(draft=False)
        drv.had_draft = True
        drv.submit(GW, wire.Submit(request_id="r", prompt=[1, 2], params=PARAMS))
        drv.workers.drop(VERIFIER.hex())
        assert drv.start(0.0) == []
        drv.workers.hello(VERIFIER, wire.Hello(role=wire.Role.VERIFIER, replica="0", pid=3, slots_total=4, max_len=256), 1.0)
        (ident, step), = drv.start(2.0)
        assert ident == VERIFIER and step.seqs[0].prefix_len == 0 and step.seqs[0].new_tokens == [1, 2]


class TestRefusedSequence:
    def test_failed_sequence_ends_alone_with_reason(self):
        """A sequence the verifier reports failed ends with an error naming the reason; its batch
        neighbour commits normally."""
        drv = driver(draft=False)
        drv.had_draft = True
        for rid in ("a", "b"):
            drv.submit(GW, wire.Submit(request_id=rid, prompt=[1, 2], params=PARAMS))
        (_, step), = drv.start(0.0)
        res = wire.VerifyResult(round=step.round, outs={"a": wire.VerifyOut(accepted=[], bonus=5)}, failed={"b": "banned holds token id 1000000000"})
        out = drv.on_verify(VERIFIER, res, 0.0)
        (b,), (a,) = deltas(out, "b"), deltas(out, "a")
        assert b.finish == wire.FinishReason.ERROR and "1000000000" in b.error
        assert a.tokens == [5] and a.finish is None and "b" not in drv.core.running
        frees = [m for i, m in out if isinstance(m, wire.Free) and i == VERIFIER]
        assert any("b" in f.seq_ids for f in frees)
