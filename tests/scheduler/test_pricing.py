"""Round prices: the start-up cost curves times the measured corrections of their buckets."""

from __future__ import annotations

import pytest

from common.tree_budget import level_width
from services.scheduler.estimates import CostCurve
from services.scheduler.pricing import CostPrices


def prices() -> CostPrices:
    p = CostPrices(width=4)
    p.set_costs(CostCurve(((1, 100.0), (256, 356.0))), CostCurve(((1, 10.0), (256, 265.0))))
    return p


class TestCostPrices:
    def test_a_verify_pass_is_priced_at_the_curve_until_measured_then_at_the_measured_ratio(self):
        """A verify pass costs the curve's ms until its (batch, rows) bucket is measured; a pass measured at
        twice the curve doubles the price of that bucket only."""
        p = prices()
        curve = p.verify.ms(16)
        assert p.verify_ms(8, 16) == pytest.approx(curve)
        p.observe_verify(8, 16, 2 * curve)
        assert p.verify_ms(8, 16) == pytest.approx(2 * curve) and p.verify_ms(1, 16) == pytest.approx(curve)

    def test_a_draft_round_appends_the_committed_tokens_then_passes_each_further_level(self):
        """Draft trees of (size, depth) cost one forward over the batch's committed tokens (expected accepted +
        the bonus, per sequence) plus one pass per level after the first over its frontier, times the
        measured correction at (batch, depth)."""
        p = prices()
        levels = sum(p.draft.ms(2 * level_width(8, d, 4)) for d in range(1, 3))
        assert p._draft_ms(2, 8, 3, 1.5) == pytest.approx(p.draft.ms(5) + levels)
        p.draft_cost.observe(10.0, 2, 3, 20.0)
        assert p._draft_ms(2, 8, 3, 1.5) == pytest.approx(2 * (p.draft.ms(5) + levels))
