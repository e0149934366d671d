"""When the tree policy explores: rounds where one sequence drafts a tree bigger than the best, so the
acceptance table learns the cells the current best never reaches (``tree_policy.py`` decides the rest).

Every ``EXPLORE_EVERY``-th round explores while a tree is best. While plain decoding is best, exploring
is rarer (``PLAIN_EXPLORE_FACTOR`` x, backing off after each explore that left plain best) and bounded
by the share of the time it may take (``PLAIN_EXPLORE_SHARE``): an explore makes its sequence's draft
catch up on every token committed since its last tree. A cold batch's first explore is sized by the
cost curves (``FIRST_EXPLORE_COST``). Torch-free.
"""

from __future__ import annotations

from common.tree_budget import AUTO_DEFAULT_SIZE, AUTO_MAX_NODES
from services.scheduler.estimates import SIZES
from services.scheduler.pricing import CostPrices

EXPLORE_EVERY = 8  # rounds
EXPLORE_EXTRA_DEPTH = 2  # an explore round drafts 2 * best depth + this many levels (cheap under load)

PLAIN_EXPLORE_FACTOR = 4  # while plain decoding is best, explore 4x less often (a tree over a big batch is costly)
PLAIN_EXPLORE_BACKOFF = 5  # ... and twice as rarely again after each explore that left plain best, up to 2^5 x
# ... and only once the modelled plain time since the last explore is the explore's cost over this
# share (its sequence's draft catch-up, levels and extra verify rows, priced by the curves): at batch
# 1 a w4a8 main's plain round took 46 ms on an AVX2-only host while an explore's draft prefilled a
# 110-token prompt (0.7 s); one every 32 rounds made speculation 0.66-0.87x plain on the first prompts.
# The share halves after each explore that left plain best (up to 2^PLAIN_EXPLORE_BACKOFF x).
PLAIN_EXPLORE_SHARE = 0.05
# A cold batch's explore tree may cost at most this many plain rounds of the batch (its extra verify
# rows plus one draft's levels): on an AVX2-only host the default tree (16 nodes, 12 levels) cost
# 1.2 s for one accepted token at 8 streams, where a plain round took 0.35 s.
FIRST_EXPLORE_COST = 1.0


class Exploring(CostPrices):
    """The explore schedule and shapes of ``TreePolicy``, which sets what they read: ``best`` (the current
    (size, depth), (0, 0) = plain), ``rounds``, ``plain_explores`` (explores since plain became best),
    ``plain_ms`` (modelled plain ms since the last explore) and ``max_depth`` (tokens)."""

    def _explore_tree(self) -> tuple[int, int]:
        """(size, depth) of an explore tree: about twice the current best, at least ``SIZES[2]`` nodes."""
        return (min(AUTO_MAX_NODES, max(2 * self.best[0], SIZES[2])),
                min(self.max_depth, 2 * self.best[1] + EXPLORE_EXTRA_DEPTH))

    def _explore_due(self, batch: int, backlog: int) -> bool:
        """Whether this round explores: every ``explore_every()``-th round, and while plain decoding is
        best only once the modelled plain time since the last explore reaches the explore's cost over
        ``PLAIN_EXPLORE_SHARE``, halved after each explore that left plain best (as ``explore_every``
        backs off; else the next such round is tried). The cost: the catch-up
        of the explorer's draft (``backlog`` / ``batch`` tokens: planning picks the least behind), one
        draft's levels and the extra verify rows, from the corrected cost curves (ms)."""
        if self.rounds % self.explore_every() != 1:
            return False
        if self.best != (0, 0):
            return True
        catch_up = self.draft.ms(backlog // batch) if backlog >= batch else 0.0
        share = PLAIN_EXPLORE_SHARE / 2 ** min(self.plain_explores, PLAIN_EXPLORE_BACKOFF)
        return self.plain_ms >= (catch_up + self._explore_cost(batch, *self._explore_tree())) / share

    def _explore_cost(self, batch: int, size: int, depth: int) -> float:
        """Predicted ms one sequence's explore tree of (``size``, ``depth``) adds to a plain round of
        ``batch``: its extra verify rows and its draft's levels (corrected curves), catch-up excluded."""
        extra_rows = self.verify_ms(batch, batch + size) - self.verify_ms(batch, batch)
        return extra_rows + self._draft_ms(1, size, depth, 0.0)

    def _first_explore(self, batch: int) -> tuple[int, int]:
        """The explore tree of a cold batch of ``batch`` sequences: the largest size up to the
        default (depth: that size, at most ``max_depth``) whose extra verify rows and one draft's
        level passes the cost curves price at most ``FIRST_EXPLORE_COST`` plain rounds; the default
        without curves. Later explores grow it (twice the best, ``choose``) where trees pay."""
        if self.verify is None or self.draft is None:
            return AUTO_DEFAULT_SIZE, self.max_depth
        limit = FIRST_EXPLORE_COST * self.verify_ms(batch, batch)
        for size in sorted((s for s in SIZES if s <= AUTO_DEFAULT_SIZE), reverse=True):
            if self._explore_cost(batch, size, min(size, self.max_depth)) <= limit:
                return size, min(size, self.max_depth)
        return SIZES[0], 1

    def explore_every(self) -> int:
        """Rounds between explore rounds: ``EXPLORE_EVERY`` while a tree is best. While plain
        decoding is best, ``PLAIN_EXPLORE_FACTOR`` times that, doubled after each explore that left
        plain best (up to ``2 ** PLAIN_EXPLORE_BACKOFF``): an explore round makes the draft catch up
        (prefill) every token its sequences committed since their last tree, for the whole batch,
        so under a load where speculation loses, exploring rarely keeps the service at plain speed,
        and most requests finish without ever paying that catch-up."""
        if self.best != (0, 0):
            return EXPLORE_EVERY
        return EXPLORE_EVERY * PLAIN_EXPLORE_FACTOR * 2 ** min(self.plain_explores, PLAIN_EXPLORE_BACKOFF)
