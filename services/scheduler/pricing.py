"""What a round costs: ms of a verify pass and of a round's draft trees, from the start-up cost curves
corrected by measurement. The tree policy (``tree_policy.py``) prices every candidate shape with it. Torch-free."""

from __future__ import annotations

from common.tree_budget import level_width
from services.scheduler.estimates import CostCurve
from services.scheduler.lookup_policy import CostCorrection


class CostPrices:
    """The verifier's and the draft's cost curves (ms of one forward over T tokens, measured by the workers at
    start: ``set_costs``) times the measured / curve ratio of their (batch, rows) and (batch, depth) buckets
    (``CostCorrection``). ``width``: frontier nodes a draft level expands (``level_width``)."""

    def __init__(self, width: int = 4) -> None:
        self.width = width
        self.verify: CostCurve | None = None
        self.draft: CostCurve | None = None
        self.verify_cost = CostCorrection()  # per (batch, rows verified)
        self.draft_cost = CostCorrection()  # per (batch, depth): level passes cost more than the curve says
        self._levels_ms: dict[tuple[int, int, int], float] = {}  # (batch, size, depth) -> level passes' curve ms

    def set_costs(self, verify: CostCurve | None = None, draft: CostCurve | None = None) -> None:
        """Install measured cost curves (from the workers' Hello)."""
        self.verify = verify or self.verify
        self.draft = draft or self.draft
        self._levels_ms.clear()

    def verify_ms(self, batch: int, rows: int) -> float:
        """Predicted ms of one verify pass over ``rows`` tokens of ``batch`` sequences: the
        start-up curve times the measured correction (``CostCorrection``)."""
        return self.verify.ms(rows) * self.verify_cost.factor(batch, rows)

    def observe_verify(self, batch: int, rows: int, ms: float) -> None:
        """A decode round's verify pass (``rows`` tokens, ``batch`` sequences, ``ms``) corrects the
        curve."""
        if self.verify is not None:
            self.verify_cost.observe(self.verify.ms(rows), batch, rows, ms)

    @staticmethod
    def append_tokens(batch: int, expected: float) -> int:
        """Tokens a round's drafts first append (prefill) when each of ``batch`` sequences committed
        ``expected`` accepted draft tokens and the bonus token in the round before (at least 1)."""
        return max(1, round(batch * (expected + 1)))

    def _draft_ms(self, batch: int, size: int, depth: int, expected: float) -> float:
        """Predicted draft ms of a round's trees: the curve's (``_draft_curve_ms``) times the
        measured correction at this batch and depth (``draft_cost``)."""
        return self._draft_curve_ms(batch, size, depth, expected) * self.draft_cost.factor(batch, depth)

    def _draft_curve_ms(self, batch: int, size: int, depth: int, expected: float) -> float:
        """Append the committed tokens (``expected`` accepted draft tokens + the bonus per sequence), then one
        pass per further level over ``level_width`` frontier nodes of each sequence's ``size``-node tree
        (start-up curve ms)."""
        append = self.draft.ms(self.append_tokens(batch, expected))
        key = (batch, size, depth)  # memoised: the policy prices every (size, depth) cell each round
        if key not in self._levels_ms:
            self._levels_ms[key] = sum(self.draft.ms(batch * level_width(size, d, self.width)) for d in range(1, depth))
        return append + self._levels_ms[key]
