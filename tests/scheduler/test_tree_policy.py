"""The tree-shape optimiser: the cost-based choice, calibration, per-request acceptance and lookup decisions
(its explore schedule: ``test_explore.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from common.config import Config
from common.tree_budget import AUTO_DEFAULT_SIZE
from services.scheduler.estimates import (COLD_START_TREES, SIZES, Calibration, CostCurve, RequestAcceptance,
                                         pruned_accepts)
from services.scheduler.lookup_policy import (DEFAULT_LOOKUP_ACCEPT, LOOKUP_EXPLORE_BACKOFF, LOOKUP_EXPLORE_EVERY,
                                             LOOKUP_EXPLORE_MIN_NODES, MIN_LOOKUP_ACCEPT, SeqLookup)
from services.scheduler.makespan import OFF_PATH_VALUE
from services.scheduler.explore import EXPLORE_EVERY
from services.scheduler.tree_policy import EXPLORE_MIN_REMAINING, PLAIN_PROBE_EVERY, TreePolicy
from tests.scheduler.policies import policy
from tests.scheduler.trees import chain_tree


class TestTreePolicy:
    def test_flat_verification_cost_picks_a_large_tree(self):
        """When verifying 128 tokens costs the same as 1, the optimiser takes a big, deep tree."""
        p = policy(((1, 100.0), (256, 100.0)), ((1, 0.1), (256, 0.1)))
        size, depth = p.choose(1)
        assert size >= 24 and depth >= 8

    def test_a_tree_must_beat_plain_by_the_margin(self):
        """A tree modelled 5% faster than plain decoding is not taken (SPEC_MARGIN is 10%); one
        modelled 20% faster is, and the rate reported is the tree's."""
        p = policy(((1, 100.0), (256, 100.0)), ((1, 0.001), (256, 0.001)))
        p.table.expected = lambda si, depth: 0.05
        best, rate, _ = p._modelled_best(1)
        assert best == (0, 0) and rate == pytest.approx(0.01)
        p.table.expected = lambda si, depth: 0.2
        best, rate, _ = p._modelled_best(1)
        assert best != (0, 0) and rate == pytest.approx(0.012, rel=1e-3)

    def test_a_plain_choice_names_the_tree_it_preferred_to(self):
        """When plain decoding wins, the round's reason (the scheduler's "tree shape" log) names the
        best tree, its expected tokens/ms and the rate it had to beat (plain's plus the margin)."""
        p = policy(((1, 100.0), (256, 100.0)), ((1, 0.001), (256, 0.001)))
        p.table.expected = lambda si, depth: 0.05 if (si, depth) == (0, 1) else None
        p.rounds = 3  # the next round neither explores nor probes plain
        assert p.choose(1) == (0, 0)
        assert p.last_reason.endswith("; best tree 1x1: 0.0105, needs 0.0110")

    def test_a_critical_path_the_draft_predicts_badly_decodes_plainly(self):
        """A tree modelled 20% faster than plain for the average sequence is not taken when the
        critical path accepts half as many draft tokens (fit 0.5: 10%, below the margin); the
        prediction the round is calibrated against still counts every sequence's tokens."""
        p = policy(((1, 100.0), (256, 100.0)), ((1, 0.001), (256, 0.001)))
        p.table.expected = lambda si, depth: 0.2
        assert p._modelled_best(2)[0] != (0, 0)
        best, _, model = p._modelled_best(2, fit=0.5)
        assert best == (0, 0) and model == (2, False, 2.0, pytest.approx(100.0))

    def test_a_request_whose_own_trees_accept_nothing_decodes_plainly(self):
        """Where the engine-wide table (chains accepted at 0.9 a level) makes a tree worth taking, a request
        whose own 30 trees accepted nothing is priced by its own reading and decodes plainly; one whose own
        trees were accepted whole still speculates; a batch of the two is priced by their mean."""
        p = policy(((1, 100.0), (256, 400.0)), ((1, 10.0), (256, 20.0)))
        poor, good = RequestAcceptance(), RequestAcceptance()
        for _ in range(30):
            poor.observe(pruned_accepts(chain_tree(12), [], 12))
            good.observe(pruned_accepts(chain_tree(12), list(range(12)), 12))

        def choose(batch, own=()):
            p.rounds = 1  # the next round neither explores nor probes plain
            return p.choose(batch, own=own)
        assert choose(1) != (0, 0) and choose(1, [good]) != (0, 0)
        assert choose(1, [poor]) == (0, 0)
        size, depth = choose(2, [poor, good])
        assert p.expected(SIZES.index(size), depth) == pytest.approx(
            (poor.blend(p.table.estimates()) + good.blend(p.table.estimates()))[SIZES.index(size), depth] / 2)

    def test_measured_verify_cost_at_this_batch_steers_the_choice(self):
        """A flat start-up curve makes a tree look free at a batch of 8; once rounds there measured
        16+ rows at 3x the curve (8 rows as the curve says), the model decodes plainly."""
        p = policy(((1, 100.0), (256, 100.0)), ((1, 0.001), (256, 0.001)))
        p.table.expected = lambda si, depth: 0.5
        assert p._modelled_best(8)[0] != (0, 0)
        p.observe_verify(8, 8, 100.0)
        p.observe_verify(8, 16, 300.0)
        assert p._modelled_best(8)[0] == (0, 0) and p._modelled_best(1)[0] != (0, 0)

    def test_measured_draft_cost_per_level_shortens_the_tree(self):
        """Rounds whose drafting measured 3x the draft curve (per-level work the curve leaves out)
        make the model choose a shallower tree than the curve alone; a catch-up round (backlog)
        does not feed that correction."""
        p = policy(((1, 100.0), (256, 120.0)), ((1, 8.0), (256, 60.0)))
        depth = p.choose(1)[1]
        assert depth > 2 and p.draft_modelled is not None
        _, d, curve_ms = p.draft_modelled
        for _ in range(5):
            p.observe_round(True, 4, draft_ms=3 * curve_ms)
        assert p.draft_cost.factor(1, d) == pytest.approx(3.0)
        p.calibration = Calibration()  # those rounds also calibrated the tokens: judge the cost correction alone
        best = p._modelled_best(1)[0]
        assert best != (0, 0) and best[1] < depth
        p.rounds = 1  # a modelled round (no explore, no plain probe)
        assert p.choose(1, backlog=500, remaining=1000) != (0, 0) and p.last_reason.startswith("max expected")
        assert p.draft_modelled is None

    def test_draft_cost_is_priced_with_the_tokens_the_drafts_appended(self):
        """A tree round whose drafts first appended more tokens than the modelled accepted paths (after
        a deeper round) corrects the draft's cost against the curve's price of the tokens it appended:
        measured at that price, the correction stays 1.0; priced as modelled, it would read dearer."""
        p = policy(((1, 100.0), (256, 120.0)), ((1, 1.0), (256, 256.0)))  # a draft pass: 1 ms per token
        p.choose(1)
        _, depth, curve_ms = p.draft_modelled
        measured = curve_ms - p.draft_append + 30  # the same levels after appending 30 tokens
        p.observe_round(True, 4, draft_ms=measured, appended=30)
        assert p.draft_cost.factor(1, depth) == pytest.approx(1.0)
        p.draft_cost.ratios.clear()
        p.observe_round(True, 4, draft_ms=measured)
        assert p.draft_cost.factor(1, depth) == pytest.approx(measured / curve_ms) and measured > curve_ms

    def test_draft_catch_up_is_spread_over_the_tokens_left(self):
        """A tree that pays per round is still chosen when the draft must first prefill a large
        backlog and many tokens remain, but not when few remain (the catch-up cannot pay back)."""
        p = policy(((1, 100.0), (256, 100.0)), ((1, 5.0), (256, 200.0)))
        assert p._modelled_best(1)[0] != (0, 0)
        assert p._modelled_best(8, backlog=1200, remaining=2000)[0] != (0, 0)
        best, _, model = p._modelled_best(8, backlog=1200, remaining=4)
        assert best == (0, 0) and model[1] is False
        _, _, model = p._modelled_best(8, backlog=1200, remaining=2000)
        assert model[3] > p.draft.ms(1200)  # the round that pays the catch-up is predicted with all of it

    def test_steep_verification_cost_picks_a_small_tree(self):
        """When every verified token costs a full pass, only a short tree (or none) pays."""
        p = policy(((1, 100.0), (2, 200.0), (256, 25600.0)), ((1, 2.0), (256, 2.0)))
        size, _ = p.choose(1)
        assert size <= 4

    def test_load_shrinks_the_tree_to_plain(self):
        """With costs linear in total tokens beyond 8, a batch of 64 falls back to plain decoding."""
        p = policy(((1, 100.0), (8, 100.0), (4096, 51200.0)), ((1, 30.0), (8, 30.0), (4096, 15360.0)))
        small_batch, _ = p.choose(1)
        p.rounds = 1
        big_batch, depth = p.choose(64)
        assert small_batch > 0 and (big_batch, depth) == (0, 0)

    def test_forced_size_is_kept(self):
        """A numeric tree_size is used as given, whatever the costs."""
        p = TreePolicy(Config(tree_size=8, max_accept_length=12))
        assert p.choose(4) == (8, 8)

class TestCalibration:
    def test_trees_that_commit_fewer_tokens_than_modelled_decode_plainly(self):
        """When speculative rounds keep committing fewer tokens than the acceptance table modelled (plain as
        modelled), the policy decodes plainly although the model alone prefers a tree; another batch
        bucket, unmeasured, takes that factor."""
        p = policy(((1, 100.0), (256, 100.0)), ((1, 0.001), (256, 0.001)))
        p.table.expected = lambda si, depth: 0.3  # a tree: 1.3 tokens per 100 ms against plain's 1.1 with the margin
        assert p.choose(1) != (0, 0) and p.modelled[1]
        for _ in range(60):
            p.calibration.observe(1, True, tokens=1, model_tokens=1.3)
        p.calibration.observe(1, False, tokens=1, model_tokens=1)
        p.rounds = 1
        assert p.choose(1) == (0, 0) and p.modelled[1] is False
        assert 0.75 < p.calibration.factor(1, True) < 0.85
        assert not p.calibration.measured(8, True)  # another batch bucket: not measured, so it takes the
        assert p.calibration.factor(8, True) == p.calibration.factor(1, True)  # nearest smaller bucket's factor

    def test_trees_whose_verify_passes_cost_more_than_their_curve_decode_plainly(self):
        """A cost error is the corrections' to carry, not the calibration's: once tree rounds' verify passes
        measure 3x the curve (plain ones as the curve says), the policy decodes plainly."""
        p = policy(((1, 100.0), (2, 110.0), (256, 2600.0)), ((1, 5.0), (256, 50.0)))
        size, _ = p.choose(1)
        assert size > 0
        for _ in range(5):
            p.observe_verify(1, size + 1, 3 * p.verify.ms(size + 1))
            p.observe_verify(1, 1, 100.0)
        p.rounds = 1
        assert p.choose(1) == (0, 0) and p.calibration.factor(1, True) == 1.0

    def test_rounds_calibrate_the_choice_made_for_them(self):
        """observe_round feeds the calibration of the kind chosen (a plain result after a speculative choice is ignored); factors stay 1 until MIN_RATE_WEIGHT rounds."""
        p = policy(((1, 100.0), (256, 100.0)), ((1, 0.1), (256, 0.1)))
        p.choose(1)
        assert p.modelled[1] is True
        p.observe_round(False, tokens=1)
        assert (1, False) not in p.calibration.tokens
        p.observe_round(True, tokens=1)
        assert p.calibration.factor(1, True) == 1.0  # one round: not enough
        for _ in range(3):
            p.observe_round(True, tokens=1)
        assert p.calibration.factor(1, True) < 1.0

    def test_rounds_with_lookup_grafts_do_not_calibrate(self):
        """A round carrying prompt-lookup nodes leaves the calibration alone (its rows and tokens are outside
        the tree model), while the draft's per-level cost still learns from it."""
        p = policy(((1, 100.0), (256, 100.0)), ((1, 0.1), (256, 0.1)))
        p.choose(1)
        p.draft_modelled = (1, 2, 10.0)
        for _ in range(4):
            p.observe_round(True, tokens=1, draft_ms=20.0, grafted=True)
        assert (1, True) not in p.calibration.tokens and p.calibration.factor(1, True) == 1.0
        assert p.draft_cost.factor(1, 2) == pytest.approx(2.0)

    def test_a_tree_round_that_first_catches_up_does_not_calibrate(self):
        """A tree round whose drafts first prefill a backlog leaves the calibration alone (its ms is mostly
        that one-off catch-up), while a plain choice with the same backlog still calibrates."""
        p = policy(((1, 100.0), (256, 100.0)), ((1, 0.1), (256, 0.1)))
        assert p.choose(8, backlog=800, remaining=128) != (0, 0) and p.modelled is None
        for _ in range(4):
            p.observe_round(True, tokens=8)
        assert (8, True) not in p.calibration.tokens
        plain = policy(((1, 100.0), (8, 100.0), (9, 5000.0), (256, 5000.0)), ((1, 0.1), (256, 0.1)))
        assert plain.choose(8, backlog=800, remaining=128) == (0, 0) and plain.modelled is not None

    def test_plain_probe_round(self):
        """Every 4th round decodes plainly while the bucket's plain factor is unmeasured, then one round in PLAIN_PROBE_EVERY."""
        p = policy(((1, 100.0), (256, 100.0)), ((1, 0.1), (256, 0.1)))
        p.rounds = 1
        shapes = [p.choose(1) for _ in range(PLAIN_PROBE_EVERY)]
        assert shapes.count((0, 0)) == 5  # rounds 3, 7, 11, 15 and the periodic probe at 5
        for _ in range(3):
            p.calibration.observe(1, False, tokens=1, model_tokens=1)
        p.rounds = 1
        shapes = [p.choose(1) for _ in range(PLAIN_PROBE_EVERY)]
        assert shapes.count((0, 0)) == 1

class TestLookupNodes:
    def lookup_policy(self, verify, accepted_per_node: float) -> tuple[TreePolicy, SeqLookup]:
        """tree_size 8 with a verify curve, and one sequence after 20 of its rounds that added 8
        lookup nodes and gained ``accepted_per_node`` x 8 accepted tokens each."""
        p = TreePolicy(Config(tree_size=8, max_accept_length=12, prompt_lookup_num_tokens=8))
        p.set_costs(CostCurve(verify), CostCurve(((1, 1.0), (256, 1.0))))
        seq = SeqLookup()
        for _ in range(20):
            seq.stats.observe(proposed=8, accepted=round(8 * accepted_per_node), added=8,
                              gained=round(8 * accepted_per_node))
        return p, seq

    def test_unmeasured_offers_the_budget(self):
        """Before lookup acceptance is measured every round may graft the budget's lookup nodes;
        none when prompt lookup is off."""
        assert TreePolicy(Config(tree_size=8)).lookup_nodes(1, 8, 4, SeqLookup()) == 8
        assert TreePolicy(Config(tree_size=8, prompt_lookup=False)).lookup_nodes(1, 8, 4, SeqLookup()) == 0

    def test_unmeasured_lookup_is_priced_at_the_default_acceptance(self):
        """Before lookup acceptance is measured, a batch whose every verified row costs a full pass grafts
        only on lookup explores (a short chain), while a flat curve or a single sequence on a curve
        where 8 more rows cost 1.6 plain rounds grafts the budget every round."""
        p = TreePolicy(Config(tree_size="auto", max_accept_length=12, prompt_lookup_num_tokens=8))
        p.set_costs(CostCurve(((1, 100.0), (256, 25600.0))), CostCurve(((1, 1.0), (256, 1.0))))
        offered = [p.lookup_nodes(8, 0, 0, SeqLookup()) for _ in range(LOOKUP_EXPLORE_EVERY)]
        assert offered == [0] * LOOKUP_EXPLORE_EVERY  # a fresh sequence each round: no explore due
        seq = SeqLookup()
        offered = [p.lookup_nodes(8, 0, 0, seq) for _ in range(LOOKUP_EXPLORE_EVERY)]
        assert offered == [0] * (LOOKUP_EXPLORE_EVERY - 1) + [LOOKUP_EXPLORE_MIN_NODES]
        for verify, batch in ((((1, 100.0), (256, 101.0)), 8), (((1, 100.0), (9, 260.0)), 1)):
            p.set_costs(CostCurve(verify))
            assert p.lookup_nodes(batch, 0, 0, SeqLookup()) == 8

    def test_a_plain_probe_round_grafts_no_lookup_nodes(self):
        """A round that measures plain decoding grafts no lookup nodes (a grafted round calibrates
        nothing), while the rounds around it graft as the lookup policy prices them."""
        _, seq = self.lookup_policy(((1, 100.0), (256, 100.0)), 0.5)
        p = policy(((1, 100.0), (256, 100.0)), ((1, 1.0), (256, 1.0)))  # tree_size auto
        p.rounds = PLAIN_PROBE_EVERY + EXPLORE_EVERY // 2  # the next round is a plain probe
        assert p.choose(1) == (0, 0) and p.last_reason == "measure plain"
        assert p.lookup_nodes(1, 0, 0, seq) == 0
        p.choose(1)
        assert p.last_reason != "measure plain" and p.lookup_nodes(1, 0, 0, seq) == p.budget.lookup_nodes > 0

    def test_well_accepted_lookup_pays_on_flat_costs(self):
        """Lookup nodes accepted half the time on a flat verify curve are kept."""
        p, seq = self.lookup_policy(((1, 100.0), (256, 100.0)), 0.5)
        assert p.lookup_nodes(1, 8, 4, seq) == 8

    def test_useless_lookup_dropped_on_steep_costs(self):
        """Lookup nodes never accepted, with each verified token costing a full pass, are
        dropped except on explore rounds, which graft a short chain."""
        p, seq = self.lookup_policy(((1, 100.0), (256, 25600.0)), 0.0)
        offered = [p.lookup_nodes(1, 8, 4, seq) for _ in range(2 * LOOKUP_EXPLORE_EVERY)]
        assert offered.count(0) == 2 * LOOKUP_EXPLORE_EVERY - 2 and offered.count(LOOKUP_EXPLORE_MIN_NODES) == 2

    def test_explore_grafts_only_what_the_pass_absorbs(self):
        """An explore graft takes the nodes whose rows add at most LOOKUP_EXPLORE_COST to the verify
        pass: the whole budget on a flat curve, LOOKUP_EXPLORE_MIN_NODES on a batch of 8 where each row
        costs a full one-row pass, and in between on a curve between the two."""
        curves = {((1, 100.0), (256, 101.0)): 8, ((1, 100.0), (256, 25600.0)): LOOKUP_EXPLORE_MIN_NODES,
                  ((1, 100.0), (17, 200.0)): 5}  # 8 rows: 143.75 ms; 13: 175.0 <= 1.25 x 143.75 < 14: 181.25
        for verify, nodes in curves.items():
            p, seq = self.lookup_policy(verify, 0.0)
            offered = [p.lookup_nodes(8, 0, 0, seq) for _ in range(LOOKUP_EXPLORE_EVERY)]
            assert offered == [0] * (LOOKUP_EXPLORE_EVERY - 1) + [nodes]

    def test_an_explore_round_where_lookup_pays_grafts_the_budget(self):
        """A due explore round grafts the whole budget when the model says lookup pays (only lookup
        that does not pay is explored with a short chain) and resets the explore back-off."""
        p, seq = self.lookup_policy(((1, 100.0), (256, 100.0)), 0.5)
        seq.misses = 3
        assert [p.lookup_nodes(8, 0, 0, seq) for _ in range(LOOKUP_EXPLORE_EVERY)] == [8] * LOOKUP_EXPLORE_EVERY
        assert seq.misses == 0

    def test_a_request_off_the_critical_path_grafts_only_on_explores(self):
        """Lookup nodes that are all accepted, on a flat verify curve, are grafted at full worth;
        at OFF_PATH_VALUE (a request ending before its batch, nothing waiting) only on explore rounds."""
        p, seq = self.lookup_policy(((1, 100.0), (256, 200.0)), 1.0)
        assert p.lookup_nodes(4, 8, 4, seq) == 8
        offered = [p.lookup_nodes(4, 8, 4, seq, value=OFF_PATH_VALUE) for _ in range(2 * LOOKUP_EXPLORE_EVERY)]
        assert offered.count(8) == 2 and offered.count(0) == 2 * LOOKUP_EXPLORE_EVERY - 2

    def test_useless_lookup_explores_back_off(self):
        """While lookup keeps not paying, the rounds that graft it anyway grow rarer (each gap
        twice the one before, up to 2^LOOKUP_EXPLORE_BACKOFF x LOOKUP_EXPLORE_EVERY)."""
        p, seq = self.lookup_policy(((1, 100.0), (256, 25600.0)), 0.0)
        offered = [p.lookup_nodes(1, 8, 4, seq) for _ in range(4000)]
        gaps = np.diff([i for i, n in enumerate(offered) if n])
        cap = LOOKUP_EXPLORE_EVERY * 2 ** LOOKUP_EXPLORE_BACKOFF
        assert list(gaps[:3]) == [LOOKUP_EXPLORE_EVERY, 2 * LOOKUP_EXPLORE_EVERY, 4 * LOOKUP_EXPLORE_EVERY]
        assert gaps[-1] == cap

    def test_measured_verify_cost_overrules_a_flat_curve(self):
        """Lookup that pays on a flat start-up curve stops being grafted once rounds at this
        batch measured the extra rows 4x dearer (CostCorrection), and pays again at batch 1 where
        nothing was measured."""
        p, seq = self.lookup_policy(((1, 100.0), (256, 100.0)), 0.25)
        assert p.lookup_nodes(8, 0, 0, seq) == 8
        for _ in range(5):
            p.observe_verify(8, 8, 130.0)
            p.observe_verify(8, 72, 560.0)
        assert p.verify_ms(8, 72) == pytest.approx(560.0) and p.verify_ms(8, 8) == pytest.approx(130.0)
        assert [p.lookup_nodes(8, 0, 0, seq) for _ in range(5)] == [0] * 5
        assert p.lookup_nodes(1, 0, 0, seq) == 8

    def test_lookup_measured_slower_than_plain_rounds_is_dropped(self):
        """Lookup the model says pays (flat curve) is not grafted at a batch where the sequence's
        rounds with it measured fewer tokens per ms than its rounds without; at another batch it
        still is."""
        p, seq = self.lookup_policy(((1, 100.0), (256, 100.0)), 0.5)
        for _ in range(3):
            seq.rates.observe(8, grafted=False, tokens=1, ms=130.0)
            seq.rates.observe(8, grafted=True, tokens=2, ms=420.0)
        assert [p.lookup_nodes(8, 0, 0, seq) for _ in range(5)] == [0] * 5
        assert p.lookup_nodes(1, 0, 0, seq) == 8

    def test_each_sequence_decides_for_itself(self):
        """Where lookup measured useless engine-wide (and for one sequence), a sequence whose own
        rounds accept its lookup nodes still grafts them, and a new sequence starts from the
        engine-wide prior (dropped on steep costs) until its own rounds say otherwise; the rounds
        measured slower for one sequence do not stop another."""
        p, useless = self.lookup_policy(((1, 100.0), (256, 1000.0)), 0.0)
        for _ in range(20):
            p.lookup.observe(proposed=8, accepted=0, added=8, gained=0)
        fresh, copying = SeqLookup(), SeqLookup()
        for _ in range(4):
            copying.stats.observe(proposed=8, accepted=8, added=8, gained=8)
        for _ in range(3):
            useless.rates.observe(1, grafted=False, tokens=1, ms=100.0)
            useless.rates.observe(1, grafted=True, tokens=1, ms=400.0)
        assert p.lookup_nodes(1, 8, 4, useless) == 0 and p.lookup_nodes(1, 8, 4, fresh) == 0
        assert p.lookup_nodes(1, 8, 4, copying) == 8
        assert fresh.stats.accept_rate(prior=p.lookup) == pytest.approx(MIN_LOOKUP_ACCEPT)
        own = 8 * sum(0.98 ** i for i in range(4))  # its decayed nodes added (all accepted)
        assert copying.stats.accept_rate(prior=p.lookup) == pytest.approx(own / (own + 8 * 2))  # prior: 2 rounds of 8

    def test_acceptance_estimate(self):
        """The per-node estimate is the default until measured, then gained / added."""
        p = TreePolicy(Config(tree_size=8))
        assert p.lookup.accept_rate() == DEFAULT_LOOKUP_ACCEPT
        p.lookup.observe(proposed=4, accepted=1, added=4, gained=1)
        assert p.lookup.accept_rate() == pytest.approx(0.25)


class TestColdStart:
    def test_speculates_until_acceptance_is_measured(self):
        """Until COLD_START_TREES trees were verified the policy asks for the default tree every round (no
        plain rounds, whatever the cost curves say; one tree that accepted nothing is one draw); then it
        chooses by the model."""
        p = TreePolicy(Config(tree_size="auto", max_accept_length=12))
        p.set_costs(CostCurve(((1, 10.0), (256, 2560.0))), CostCurve(((1, 100.0), (256, 25600.0))))
        assert {p.choose(1) for _ in range(40)} == {(AUTO_DEFAULT_SIZE, 12)}
        for _ in range(COLD_START_TREES - 1):
            p.observe(chain_tree(4), [])
            assert {p.choose(1) for _ in range(10)} == {(AUTO_DEFAULT_SIZE, 12)}
        p.observe(chain_tree(4), [0])
        shapes = [p.choose(1) for _ in range(40)]
        assert shapes.count((0, 0)) > 30  # a draft level costs 10 plain steps here: plain wins

    def test_a_cold_batch_measures_acceptance_on_one_sequence(self):
        """Before any tree was verified, a batch of several sequences decodes plainly while one of them
        drafts the default tree (``explore_shape``), so the drafts of the others need not prefill first;
        a cold batch about to finish does not probe at all."""
        p = TreePolicy(Config(tree_size="auto", max_accept_length=12))
        p.set_costs(CostCurve(((1, 10.0), (256, 20.0))), CostCurve(((1, 0.1), (256, 0.2))))
        assert p.choose(8) == (0, 0)
        assert p.explore_shape == (AUTO_DEFAULT_SIZE, 12)
        assert p.choose(1) == (AUTO_DEFAULT_SIZE, 12) and p.explore_shape is None
        assert p.choose(8, remaining=EXPLORE_MIN_REMAINING - 1) == (0, 0) and p.explore_shape is None

    @pytest.mark.parametrize("verify, draft, shape", [
        (((1, 10.0), (256, 20.0)), ((1, 0.1), (256, 0.2)), (AUTO_DEFAULT_SIZE, 12)),  # flat: the default
        (((1, 100.0), (256, 25600.0)), ((1, 0.1), (256, 0.2)), (6, 6)),  # 100 ms a row: 8 rows + levels > 1 plain round
        # + 50 ms a draft row: 4 nodes cost 400 + 50 + levels of 2, 1, 1 rows (level_width) = 650 ms, 6 nodes 1100
        (((1, 100.0), (256, 25600.0)), ((1, 50.0), (256, 12800.0)), (4, 4)),
        (((1, 100.0), (256, 25600.0)), ((1, 1000.0), (256, 256000.0)), (SIZES[0], 1)),  # nothing fits: 1 node
    ])
    def test_a_cold_batch_explores_a_tree_it_can_afford(self, verify, draft, shape):
        """A cold batch's explore tree is the largest whose extra verify rows and draft levels the cost
        curves price at most FIRST_EXPLORE_COST plain rounds of the batch (8 sequences here)."""
        p = TreePolicy(Config(tree_size="auto", max_accept_length=12))
        p.set_costs(CostCurve(verify), CostCurve(draft))
        assert p.choose(8) == (0, 0) and p.explore_shape == shape
