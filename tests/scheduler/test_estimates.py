"""What the tree policy measures: cost curves, the counterfactual acceptance table, calibration."""

from __future__ import annotations

import numpy as np
import pytest

from common.tree import TokenTree
from services.scheduler.estimates import (COLD_START_TREES, PRIOR_WEIGHT, REQUEST_PRIOR_WEIGHT, SIZES, TOKEN_DECAY,
                                         TOKEN_PRIOR_ROUNDS, AcceptanceTable, Calibration, CostCurve, RequestAcceptance,
                                         pruned_accepts)
from services.scheduler.lookup_policy import DECAY
from tests.scheduler.trees import chain_tree


class TestCostCurve:
    def test_interpolates_and_extrapolates(self):
        """Between points the cost is linear; past the last point it follows the last slope."""
        c = CostCurve(((1, 100.0), (8, 100.0), (64, 300.0)))
        assert c.ms(4) == pytest.approx(100.0)
        assert c.ms(36) == pytest.approx(200.0)
        assert c.ms(128) == pytest.approx(300.0 + 200.0 / 56 * 64)

    def test_matches_numpy_interpolation_at_every_token_count(self):
        """The memoised piecewise-linear cost equals np.interp at and between the points (flat below the
        first), asked twice (the second answer from the memo)."""
        points = ((2, 30.0), (4, 54.4), (8, 99.7), (16, 192.9), (256, 3226.8))
        c = CostCurve(points)
        xs, ys = [t for t, _ in points], [m for _, m in points]
        for _ in range(2):
            for tokens in range(1, 257):
                assert c.ms(tokens) == pytest.approx(float(np.interp(tokens, xs, ys)), rel=1e-12)

    def test_rejects_a_single_point(self):
        """A curve needs at least two positive points."""
        with pytest.raises(ValueError):
            CostCurve(((1, 10.0),))


class TestAcceptanceTable:
    def test_counterfactual_pruning(self):
        """A fully accepted 12-deep chain counts 12 at full size, only n at size n < 12, and D at depth cap D."""
        t = AcceptanceTable(max_depth=12)
        for _ in range(4):
            t.observe(chain_tree(12), list(range(12)))
        assert t.expected(SIZES.index(48), 12) == pytest.approx(12)
        assert t.expected(SIZES.index(4), 12) == pytest.approx(4)
        assert t.expected(SIZES.index(48), 3) == pytest.approx(3)

    def test_measured_only_after_the_cold_start_trees_even_when_the_first_accepted_nothing(self):
        """One tree that accepted nothing gives every cell an estimate (0) but does not make the table
        measured; ``COLD_START_TREES`` verified trees do, and an empty tree does not count."""
        t = AcceptanceTable(max_depth=4)
        t.observe(chain_tree(4), [])
        assert t.expected(SIZES.index(1), 1) == 0.0 and not t.measured()
        t.observe(TokenTree.empty(), [])
        for _ in range(COLD_START_TREES - 2):
            t.observe(chain_tree(4), [0])
        assert not t.measured()
        t.observe(chain_tree(4), [0])
        assert t.measured()

    def test_no_estimate_beyond_observed_size(self):
        """Sizes larger than any verified tree have no estimate."""
        t = AcceptanceTable(max_depth=4)
        for _ in range(4):
            t.observe(TokenTree.build([1, 2], [-1, 0], [-0.1, -0.2]), [0, 1])
        assert t.expected(SIZES.index(4), 2) is None
        assert t.expected(SIZES.index(2), 2) == pytest.approx(2)

    def test_a_sparse_big_cell_is_shrunk_toward_the_well_observed_cell_inside_it(self):
        """One big tree that accepted 12 among many 4-node trees that accepted 2 does not make the
        big cell's estimate 12: it is pulled toward the small trees' mean (the winner's curse), and
        it approaches its own mean as its observations grow."""
        t = AcceptanceTable(max_depth=12)
        for _ in range(20):
            t.observe(chain_tree(4, siblings=0), [0, 1])
        t.observe(chain_tree(12, siblings=0), list(range(12)))
        one = t.expected(SIZES.index(12), 12)
        assert 2 < one < 12 / 2
        for _ in range(10):
            t.observe(chain_tree(12, siblings=0), list(range(12)))
        assert t.expected(SIZES.index(12), 12) > one and t.expected(SIZES.index(12), 12) > 9

    def test_a_cell_decays_only_with_its_own_observations(self):
        """A cell that only every 8th (explore) tree reaches keeps the weight of its own observations:
        the 4-node trees in between neither add to nor age it, while the cells they do reach age with them."""
        t = AcceptanceTable(max_depth=12)
        for _ in range(10):
            for _ in range(7):
                t.observe(chain_tree(4, siblings=0), [0, 1])
            t.observe(chain_tree(12, siblings=0), list(range(12)))
        assert t.weight[SIZES.index(12), 12] == pytest.approx(sum(DECAY ** k for k in range(10)))
        assert t.weight[SIZES.index(4), 4] == pytest.approx(sum(DECAY ** k for k in range(80)))
        assert t.expected(SIZES.index(12), 12) > 10  # 12 accepted each time, shrunk a little toward 2-3

    def test_the_prior_is_the_most_observed_cell_below_with_ties_to_the_same_size_then_the_nearest_depth(self):
        """Each cell's prior (the mean it is shrunk toward) comes from the cell of highest weight at or
        below it in size and depth, ties going to the same size, then the nearest depth: the one-pass
        prefix maximum agrees with a search of every sub-rectangle on random tables with many ties."""
        rng = np.random.default_rng(0)
        for _ in range(20):
            t = AcceptanceTable(max_depth=6)
            t.weight = rng.integers(0, 3, size=t.weight.shape).astype(float)  # small integers: many ties
            t.total = t.weight * rng.uniform(0, 4, size=t.weight.shape)
            mean = np.divide(t.total, t.weight, out=np.zeros_like(t.total), where=t.weight > 0)
            got = t._shrink()
            for si in range(len(SIZES)):
                for depth in range(1, 7):
                    sub = t.weight[si::-1, depth:0:-1]
                    i, j = np.unravel_index(int(np.argmax(sub)), sub.shape)
                    prior = mean[si - i, depth - j]
                    want = (t.total[si, depth] + PRIOR_WEIGHT * prior) / (t.weight[si, depth] + PRIOR_WEIGHT)
                    assert got[si, depth] == pytest.approx(want), (si, depth)


class TestPrunedAccepts:
    def test_cells_the_tree_does_not_reach_are_nan(self):
        """A 4-node, 4-deep chain whose first two nodes were accepted reads 2 at (4, 4), 1 at depth cap 1
        and at size 1, and NaN at sizes above 4 nodes, at depth 0 and at depth caps past its own depth."""
        kept = pruned_accepts(chain_tree(4, siblings=0), [0, 1], max_depth=6)
        assert kept[SIZES.index(4), 4] == 2 and kept[SIZES.index(4), 1] == 1 and kept[0, 4] == 1
        assert np.isnan(kept[SIZES.index(6), 4]) and np.isnan(kept[0, 0]) and np.isnan(kept[0, 5])


class TestRequestAcceptance:
    def test_before_its_first_tree_a_request_reads_the_engine_wide_table(self):
        """A request without a verified tree blends to the engine-wide estimates unchanged."""
        table = np.full((len(SIZES), 5), 1.5)
        assert np.array_equal(RequestAcceptance().blend(table), table)

    def test_own_trees_pull_the_estimate_halfway_after_the_prior_s_worth(self):
        """After REQUEST_PRIOR_WEIGHT (undecayed: DECAY-weighted) trees that accepted nothing, a cell the
        engine-wide table puts at 2 reads about half of it; cells the request never reached keep the table's
        value, and an unmeasured (NaN) cell stays unmeasured."""
        own = RequestAcceptance()
        for _ in range(int(REQUEST_PRIOR_WEIGHT)):
            own.observe(pruned_accepts(chain_tree(4, siblings=0), [], max_depth=4))
        table = np.full((len(SIZES), 5), 2.0)
        table[-1, 4] = np.nan
        got = own.blend(table)
        w = sum(DECAY ** k for k in range(int(REQUEST_PRIOR_WEIGHT)))
        assert got[SIZES.index(4), 4] == pytest.approx(2.0 * REQUEST_PRIOR_WEIGHT / (w + REQUEST_PRIOR_WEIGHT))
        assert 0.9 < got[SIZES.index(4), 4] < 1.1
        assert got[SIZES.index(8), 4] == 2.0 and np.isnan(got[-1, 4])


class TestCalibration:
    def test_a_stale_speculative_reading_fades_for_one_sequence_only(self):
        """At batch 1, ~15 plain rounds age a short-falling speculative reading out (factor back to 1.0, the
        model decides again); at a batch of 8 it stays (re-trying would make every draft catch up)."""
        c = Calibration()
        for batch in (1, 8):
            for _ in range(5):
                c.observe(batch, True, tokens=batch, model_tokens=4 * batch)
            for _ in range(20):
                c.observe(batch, False, tokens=batch, model_tokens=batch)
        assert c.factor(1, True) == 1.0 and not c.measured(1, True)
        assert c.factor(8, True) < 0.8 and c.factor(1, False) == pytest.approx(1.0)

    def test_the_factor_is_committed_over_modelled_tokens_shrunk_toward_one(self):
        """With TOKEN_PRIOR_ROUNDS rounds' worth of modelled tokens as prior, rounds that commit exactly what
        was modelled read 1.0 and rounds at half of it read (t + prior) / (mt + prior)."""
        c = Calibration()
        for _ in range(3):
            c.observe(4, True, tokens=12, model_tokens=12)
            c.observe(8, True, tokens=8, model_tokens=16)
        assert c.factor(4, True) == pytest.approx(1.0)
        w = sum(TOKEN_DECAY ** i for i in range(3))
        prior = TOKEN_PRIOR_ROUNDS * 16
        assert c.factor(8, True) == pytest.approx((8 * w + prior) / (16 * w + prior))

    def test_speculative_rounds_do_not_age_the_plain_reading(self):
        """At batch 1 a plain reading stays measured through many speculative rounds (no plain
        probe every few rounds); only its own rounds decay it."""
        c = Calibration()
        for _ in range(3):
            c.observe(1, False, tokens=1, model_tokens=1)
        for _ in range(30):
            c.observe(1, True, tokens=4, model_tokens=4)
        assert c.measured(1, False) and c.measured(1, True)

    def test_an_unmeasured_batch_takes_the_nearest_smaller_measured_factor(self):
        """A bucket without its own readings uses the nearest smaller bucket's factor (never a bigger one's),
        and its own readings replace it once measured."""
        c = Calibration()
        for _ in range(3):
            c.observe(2, True, tokens=2, model_tokens=8)  # trees commit a quarter of the modelled tokens
            c.observe(8, False, tokens=8, model_tokens=8)
        short = c.factor(2, True)
        assert short < 0.8 and c.factor(8, True) == short and c.factor(4, True) == short
        assert c.factor(1, True) == 1.0 and c.factor(4, False) == 1.0 and c.factor(8, False) == pytest.approx(1.0)
        for _ in range(3):
            c.observe(8, True, tokens=4, model_tokens=4)
        assert c.factor(8, True) == pytest.approx(1.0)

    def test_one_short_tree_moves_the_factor_little_a_lasting_shortfall_moves_it(self):
        """The factor is shrunk toward 1 and slow: one tree that commits 1 of 5 modelled tokens costs at
        most 10% after a run at the model's rate, while 60 rounds at half the modelled tokens bring the
        factor near 0.5."""
        c = Calibration()
        for _ in range(10):
            c.observe(1, True, tokens=5, model_tokens=5)
        c.observe(1, True, tokens=1, model_tokens=5)
        assert 0.9 <= c.factor(1, True) < 1.0
        for _ in range(60):
            c.observe(1, True, tokens=2.5, model_tokens=5)
        assert 0.5 < c.factor(1, True) < 0.65

    def test_a_round_without_a_model_is_ignored(self):
        """A round with no modelled tokens does not calibrate; batch sizes map to their buckets."""
        c = Calibration()
        for _ in range(5):
            c.observe(1, True, tokens=4, model_tokens=0)
        assert c.factor(1, True) == 1.0 and (1, True) not in c.tokens and not c.measured(1, True)
        assert [Calibration.bucket(b) for b in (1, 2, 3, 4, 7, 8, 64)] == [1, 2, 2, 4, 4, 8, 8]
