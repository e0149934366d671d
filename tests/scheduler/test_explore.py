"""When the tree policy explores (``explore.py``): the probe tree's shape, how often, and at what share of the time."""

from __future__ import annotations

import numpy as np
import pytest

from common.tree_budget import AUTO_DEFAULT_SIZE
from services.scheduler import explore
from services.scheduler.estimates import SIZES, CostCurve
from services.scheduler.explore import (EXPLORE_EVERY, EXPLORE_EXTRA_DEPTH, PLAIN_EXPLORE_BACKOFF, PLAIN_EXPLORE_FACTOR,
                                       PLAIN_EXPLORE_SHARE)
from services.scheduler.tree_policy import EXPLORE_MIN_REMAINING, PLAIN_PROBE_EVERY
from tests.scheduler.policies import policy


class TestExploring:
    def test_explores_twice_the_best(self, monkeypatch):
        """Every EXPLORE_EVERY-th round asks for a tree twice the current best size, and
        at most twice its depth plus EXPLORE_EXTRA_DEPTH (cheap when the best is small)."""
        monkeypatch.setattr(explore, "PLAIN_EXPLORE_SHARE", float("inf"))  # plain is best: explore now
        p = policy(((1, 100.0), (2, 200.0), (256, 25600.0)), ((1, 2.0), (256, 2.0)))
        best = p.choose(1)
        p.rounds = 0
        assert p.choose(1) == best  # the rest of the batch keeps the best shape
        size, depth = p.explore_shape
        assert size == max(2 * best[0], SIZES[2])
        assert depth == min(12, 2 * best[1] + EXPLORE_EXTRA_DEPTH) < 12

    def test_no_explore_when_the_batch_is_about_to_finish(self, monkeypatch):
        """An explore round is skipped while the batch may generate fewer than EXPLORE_MIN_REMAINING
        tokens per sequence: the probe's draft catch-up would cost more than the tokens left."""
        monkeypatch.setattr(explore, "PLAIN_EXPLORE_SHARE", float("inf"))  # plain is best: explore now
        p = policy(((1, 100.0), (2, 200.0), (256, 25600.0)), ((1, 2.0), (256, 2.0)))
        p.choose(1)
        p.rounds = 0
        p.choose(1, backlog=200, remaining=EXPLORE_MIN_REMAINING - 1)
        assert p.explore_shape is None and p.last_reason != "explore"
        p.rounds = 0
        p.choose(1, backlog=200, remaining=EXPLORE_MIN_REMAINING)
        assert p.explore_shape is not None

    def test_plain_best_explores_less_often(self, monkeypatch):
        """While plain decoding is the best shape, explore rounds come PLAIN_EXPLORE_FACTOR times less often
        (the share of time explores may take left out here)."""
        monkeypatch.setattr(explore, "PLAIN_EXPLORE_SHARE", float("inf"))
        p = policy(((1, 10.0), (256, 2560.0)), ((1, 100.0), (256, 25600.0)))  # a draft level costs 10 plain steps
        p.rounds = EXPLORE_EVERY  # the next round would explore if a tree were best
        p.choose(1)
        assert p.best == (0, 0) and p.last_reason != "explore"
        p.rounds = EXPLORE_EVERY * PLAIN_EXPLORE_FACTOR
        p.choose(1)
        assert p.last_reason == "explore"

    def test_an_explore_round_uses_the_best_for_its_batch(self, monkeypatch):
        """An explore round gives the batch the shape modelled for it (here plain decoding) and one sequence the
        probe tree, not a best left from before (the default tree after the cold start, or another batch's)."""
        monkeypatch.setattr(explore, "PLAIN_EXPLORE_SHARE", float("inf"))
        p = policy(((1, 10.0), (256, 2560.0)), ((1, 100.0), (256, 25600.0)))
        p.best, p.rounds = (AUTO_DEFAULT_SIZE, 12), 0  # stale: the next round is due to explore
        assert p.choose(4) == (0, 0) and p.last_reason == "explore"
        assert p.explore_shape == (SIZES[2], EXPLORE_EXTRA_DEPTH)

    def test_plain_best_backs_off_exploring_and_a_tree_win_resets_it(self, monkeypatch):
        """While plain stays best, explore rounds grow rarer (gaps double up to 2^PLAIN_EXPLORE_BACKOFF times
        EXPLORE_EVERY * PLAIN_EXPLORE_FACTOR rounds); once a tree is best again, exploring is back to EXPLORE_EVERY
        (the share of time explores may take left out here)."""
        monkeypatch.setattr(explore, "PLAIN_EXPLORE_SHARE", float("inf"))
        p = policy(((1, 10.0), (256, 2560.0)), ((1, 100.0), (256, 25600.0)))  # a draft level costs 10 plain steps
        explores = []
        for _ in range(20000):
            p.choose(1)
            explores += [p.rounds] if p.last_reason == "explore" else []
        assert p.best == (0, 0)
        gaps = np.diff(explores)
        cap = EXPLORE_EVERY * PLAIN_EXPLORE_FACTOR * 2 ** PLAIN_EXPLORE_BACKOFF
        assert all(a <= b for a, b in zip(gaps, gaps[1:])) and gaps[0] <= 2 * EXPLORE_EVERY * PLAIN_EXPLORE_FACTOR
        assert gaps[-1] == cap and len(explores) < 20000 // cap + PLAIN_EXPLORE_BACKOFF + 2
        p.set_costs(CostCurve(((1, 100.0), (256, 100.0))), CostCurve(((1, 0.1), (256, 0.1))))  # now trees pay
        shapes = [p.choose(1) for _ in range(2 * PLAIN_PROBE_EVERY)]
        assert any(shape != (0, 0) for shape in shapes) and p.plain_explores == 0 and p.explore_every() == EXPLORE_EVERY

    @pytest.mark.parametrize("backlog", [0, 100])
    def test_plain_best_explores_take_a_bounded_share_of_the_time(self, backlog):
        """While plain decoding is best, an explore comes only once the modelled plain time since the last one
        reaches its cost (the explorer's draft catch-up of ``backlog`` tokens, levels, extra rows) over
        PLAIN_EXPLORE_SHARE, halved after each explore that left plain best: a draft 100 tokens behind explores
        about 10x more rarely than one caught up, and each gap is about twice the one before."""
        p = policy(((1, 10.0), (256, 2560.0)), ((1, 10.0), (256, 2560.0)))  # plain 10 ms; draft 10 ms a row
        explores = []
        for _ in range(20000):
            p.choose(1, backlog=backlog)
            explores += [p.rounds] if p.last_reason == "explore" else []
        assert p.best == (0, 0) and len(explores) >= 3
        cost = backlog * 10.0 + 10.0 + 20.0 + 4 * 10.0  # catch-up, append + 1 level of 2 nodes (level_width), 4 rows
        for k, gap in enumerate(np.diff(explores)[:2]):
            share = PLAIN_EXPLORE_SHARE / 2 ** (k + 1)  # k + 1 explores have left plain best
            expected = cost / share / 10.0  # rounds of 10 ms
            assert expected <= gap <= expected + EXPLORE_EVERY * PLAIN_EXPLORE_FACTOR * 2 ** (k + 1)

    def test_explore_shape_is_set_on_explore_rounds_only(self):
        """Explore rounds return the current best shape (for the batch) and set ``explore_shape``
        (for one sequence); every other round clears it."""
        p = policy(((1, 10.0), (256, 2560.0)), ((1, 100.0), (256, 25600.0)))
        for _ in range(2000):
            shape = p.choose(4)
            exploring = p.last_reason == "explore"
            assert (p.explore_shape is not None) == exploring
            assert not exploring or (shape == p.best and p.explore_shape[0] >= SIZES[2])
