"""Refills and path_values: which sequences' lookup tokens count in full when no request waits."""

import pytest

from services.scheduler.makespan import (FIT_DECAY, FIT_PRIOR, OFF_PATH_VALUE, REFILL_ROUNDS, DraftFit, Refills, critical_fit,
                                         observe_fits, path_values)


class TestRefills:
    def test_a_closed_batch_until_clients_show_they_refill(self):
        """Before any request finished mid-run, clients are not assumed to refill."""
        r = Refills()
        r.round_started(admitted=8)  # a first wave arriving is not a refill
        assert not r.refilling

    def test_an_admission_soon_after_a_finish_is_a_refill(self):
        """A request admitted within REFILL_ROUNDS round starts of a finish that left others running sets refilling."""
        r = Refills()
        r.finished(others_running=True)
        for _ in range(REFILL_ROUNDS - 1):
            r.round_started(admitted=0)
        r.round_started(admitted=1)
        assert r.refilling

    def test_a_finish_nobody_refills_clears_it(self):
        """After refilling was seen, a finish followed by REFILL_ROUNDS + 1 round starts without an admission clears it."""
        r = Refills()
        r.finished(others_running=True)
        r.round_started(admitted=1)
        r.finished(others_running=True)
        for _ in range(REFILL_ROUNDS):
            r.round_started(admitted=0)
        assert r.refilling  # not yet decided
        r.round_started(admitted=0)
        assert not r.refilling

    def test_an_emptied_batch_is_not_refilled(self):
        """When the batch empties, the next arrival starts a new batch: it does not count as a refill, and refills seen before no longer count."""
        r = Refills()
        r.finished(others_running=True)
        r.round_started(admitted=1)
        assert r.refilling
        r.finished(others_running=True)
        r.finished(others_running=False)
        assert not r.refilling
        r.round_started(admitted=8)
        assert not r.refilling


class TestPathValues:
    def test_only_the_longest_remaining_count_in_full(self):
        """Sequences with the batch's largest expected remaining tokens (ties included) are worth 1; the others OFF_PATH_VALUE."""
        assert path_values([120.0, 100.0, 120.0, 3.0], refilled=False) == [1.0, OFF_PATH_VALUE, 1.0, OFF_PATH_VALUE]

    def test_refilled_slots_make_every_token_count(self):
        """When a request waits or clients refill, every sequence's tokens are worth 1; a lone sequence always is."""
        assert path_values([120.0, 3.0], refilled=True) == [1.0, 1.0]
        assert path_values([3.0], refilled=False) == [1.0]


class TestDraftFit:
    def test_fit_is_own_over_batch_mean_acceptance(self):
        """A sequence whose trees accepted 1 token per round where its batch averaged 3 gets (1 + prior) / (3 + prior) after one round; before any round 1.0."""
        weak, strong = DraftFit(), DraftFit()
        assert weak.ratio() == 1.0
        observe_fits([(weak, 1), (strong, 5)])
        assert weak.ratio() == pytest.approx((1 + FIT_PRIOR) / (3 + FIT_PRIOR))
        assert strong.ratio() == pytest.approx((5 + FIT_PRIOR) / (3 + FIT_PRIOR))

    def test_rounds_without_a_tree_bring_the_fit_back_toward_one(self):
        """A fit read low in one round decays toward 1.0 over rounds that observe nothing (each keeps
        FIT_DECAY of the readings), and stays below 1 while readings remain."""
        weak, strong = DraftFit(), DraftFit()
        observe_fits([(weak, 0), (strong, 6)])
        low = weak.ratio()
        weak.age()
        assert low < weak.ratio() < 1.0
        assert weak.ratio() == pytest.approx((0 + FIT_PRIOR) / (3 * FIT_DECAY + FIT_PRIOR))
        for _ in range(30):
            weak.age()
        assert weak.ratio() == pytest.approx(1.0, abs=0.1)

    def test_a_lone_drafted_tree_says_nothing(self):
        """A round where one sequence drafted (the others decoded plainly or explored) leaves its fit unchanged."""
        fit = DraftFit()
        observe_fits([(fit, 0)])
        assert fit.ratio() == 1.0

    def test_critical_fit_is_the_weakest_on_the_critical_path(self):
        """The batch's fit is the lowest among the sequences with the largest remaining tokens; sequences ending earlier do not count; refilled slots give 1.0."""
        assert critical_fit([100.0, 100.0, 20.0], [0.9, 0.6, 0.1], refilled=False) == 0.6
        assert critical_fit([100.0, 100.0, 20.0], [0.9, 0.6, 0.1], refilled=True) == 1.0
        assert critical_fit([100.0], [0.1], refilled=False) == 1.0
