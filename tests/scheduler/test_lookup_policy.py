"""Lookup pays-or-not arithmetic and the measured correction of the cost curves."""

from __future__ import annotations

import pytest

from services.scheduler.estimates import CostCurve
from services.scheduler.lookup_policy import LookupStats, RoundRates, CostCorrection


class TestCostCorrection:
    def test_factor_is_measured_over_curve_per_batch_and_rows_bucket(self):
        """The correction is the decayed mean of measured/curve ms in the (batch, rows) power-of-two
        bucket, or between the same batch's measured buckets either side (log2 rows), else the
        nearest below, else above; an unmeasured batch takes the nearest smaller measured batch's;
        1.0 with none, and rounds without ms are ignored."""
        c = CostCorrection()
        c.observe(100.0, batch=8, rows=40, ms=400.0)
        c.observe(100.0, batch=8, rows=40, ms=0.0)  # ignored
        assert c.factor(7, 33) == pytest.approx(4.0) and c.factor(8, 64) == pytest.approx(4.0)
        assert c.factor(8, 65) == pytest.approx(4.0)  # unmeasured: the largest measured rows bucket below
        assert c.factor(8, 16) == pytest.approx(4.0)  # nothing below: the smallest measured bucket above
        assert c.factor(1, 40) == 1.0  # no smaller batch measured either
        assert c.factor(16, 40) == pytest.approx(4.0)  # batch 16 unmeasured: batch 8's factor
        c.observe(100.0, batch=8, rows=10, ms=200.0)
        assert c.factor(8, 12) == pytest.approx(2.0) and c.factor(8, 3) == pytest.approx(2.0)
        assert c.factor(8, 32) == pytest.approx(3.0)  # between 16 (2.0) and 64 (4.0): half way in log2 rows


class TestNodes:
    def test_gain_must_cover_the_extra_rows(self):
        """Lookup nodes pay when the tokens they add outgrow the extra verify ms: on a flat cost
        any gain pays, on a cost linear in rows a small gain does not."""
        s = LookupStats()
        s.observe(proposed=8, accepted=1, added=8, gained=1)
        assert s.nodes(lambda rows: 100.0, batch=4, size=0, expected=0.0, cap=8) == 8
        assert s.nodes(lambda rows: 10.0 * rows, batch=4, size=0, expected=0.0, cap=8) == 0

    def test_tokens_worth_less_must_gain_more(self):
        """A gain that pays for its rows at full worth does not at half worth (a request off the
        batch's critical path, makespan.py)."""
        s = LookupStats()
        s.observe(proposed=8, accepted=2, added=8, gained=2)
        cost = lambda rows: 100.0 + 5.0 * rows  # 4 sequences: 4 plain rows 120 ms, with 8 nodes each 280 ms
        # worth 1: 3 tokens / 280 ms > 1 / 120 ms; worth 0.5: 2 / 280 < 1 / 120
        assert s.nodes(cost, batch=4, size=0, expected=0.0, cap=8) == 8
        assert s.nodes(cost, batch=4, size=0, expected=0.0, value=0.5, cap=8) == 0

    def test_lookup_without_matches_is_priced_at_the_default_acceptance(self):
        """Rounds where lookup found no match add no rows and no gain, so they say nothing about a
        match's worth: the next match is priced at DEFAULT_LOOKUP_ACCEPT per node, grafted on a flat
        verify curve and not where every row costs as much as the round's others."""
        s = LookupStats()
        for _ in range(10):
            s.observe(proposed=0, accepted=0, added=0, gained=0)
        assert s.measured and s.nodes(lambda rows: 100.0, batch=4, size=0, expected=0.0, cap=8) == 8
        assert s.nodes(lambda rows: 10.0 * rows, batch=4, size=0, expected=0.0, cap=8) == 0

    def test_a_kinked_verify_curve_grafts_only_the_cheap_nodes(self):
        """Where the second verified row is nearly free and later ones cost almost a pass each (a w4a8
        main on the Zen 2 host: 1 / 2 / 4 / 8 rows in 32 / 35 / 54 / 102 ms), lookup accepted at 0.22 per
        node grafts one node (eight would lose), and lookup accepted at 0.9 per node all eight."""
        curve = CostCurve(((1, 32.0), (2, 35.0), (4, 54.0), (8, 102.0), (16, 195.0)))
        for per_node, want in ((0.22, 1), (0.9, 8)):
            s = LookupStats()
            for _ in range(20):
                s.observe(proposed=8, accepted=round(8 * per_node), added=8, gained=round(8 * per_node))
            assert s.nodes(curve.ms, batch=1, size=0, expected=0.0, cap=8) == want, per_node


class TestRoundRates:
    def test_lookup_loses_only_when_both_kinds_are_measured_slower(self):
        """Lookup loses in a batch bucket once rounds with it measured fewer tokens/ms than rounds
        without (two decayed rounds each); other buckets and unmeasured kinds do not lose."""
        r = RoundRates()
        r.observe(8, grafted=True, tokens=18, ms=420.0)
        r.observe(8, grafted=False, tokens=8, ms=140.0)
        r.observe(8, grafted=False, tokens=8, ms=140.0)
        assert not r.loses(8)  # one lookup round is not enough
        r.observe(8, grafted=True, tokens=16, ms=330.0)
        assert r.loses(8) and r.loses(5) and not r.loses(4) and not r.loses(16)
        r.observe(8, grafted=True, tokens=0, ms=0.0)  # no ms: ignored
        assert r.rate(8, True) == pytest.approx((18 * 0.9 + 16) / (420 * 0.9 + 330))
