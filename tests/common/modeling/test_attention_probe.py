"""The start-up attention probe: timings in, column limits out; routing by those limits; caching."""

import numpy as np
import pytest

from common.modeling.attention_probe import (COLUMN_LADDER, PASS_REPS, PROBE_REPS, SDPA_MARGIN, AttentionPlan,
                                             choose_max_cols, install, measure, monotone_limits, probe_timings,
                                             sdpa_wins)
from common.modeling.loader import load_model
from common.modeling.native import library
from common.modeling.runner import forward_segments

needs_lib = pytest.mark.skipif(library() is None, reason="no C++ compiler: no exact attention to probe")


def _timings(rows: int, exact_wins_up_to: int | None) -> dict[str, float]:
    """Fake timings: the C++ kernel 1 ms up to ``exact_wins_up_to`` columns (None: always), 3 ms above; SDPA 2 ms."""
    out = {}
    for cols in COLUMN_LADDER:
        fast = exact_wins_up_to is None or cols <= exact_wins_up_to
        out[f"{rows}/{cols}/exact"], out[f"{rows}/{cols}/sdpa"] = (1.0 if fast else 3.0), 2.0
    return out


def _model():
    """A bf16 tiny model whose small passes attend by the C++ kernel within a 4-row, 512-column limit."""
    model = load_model("tiny-random:0", "bfloat16")[0]
    model.exact_lib, model.exact_limits = library(), ((4, 512),)
    return model


def fake_timer(calls: list, exact_wins_up_to: int):
    """The C++ kernel 1 ms up to ``exact_wins_up_to`` columns and 3 ms above, SDPA 2 ms; records labels."""
    def timer(label, fn):
        calls.append(label)
        arm, _, cols = label
        return 2.0 if arm == "sdpa" else (1.0 if int(cols) <= exact_wins_up_to else 3.0)
    return timer


class TestChooseMaxCols:
    def test_limit_is_the_last_count_before_sdpa_wins(self):
        """SDPA faster from 2,048 columns: the C++ kernel keeps passes up to 1,024."""
        assert choose_max_cols(_timings(4, 1024), 4) == 1024

    def test_no_limit_when_the_kernel_always_wins(self):
        """The C++ kernel faster at every count: no column limit (None)."""
        assert choose_max_cols(_timings(1, None), 1) is None

    def test_zero_when_sdpa_wins_at_the_first_count(self):
        """SDPA faster already at the first count: the kernel gets no pass of that many rows (0)."""
        assert choose_max_cols(_timings(8, 0), 8) == 0

    def test_sdpa_must_win_by_the_margin(self):
        """SDPA faster by less than SDPA_MARGIN (host drift: 138 against 145 ms) leaves the pass to the C++
        kernel; faster by more than the margin takes it."""
        t = _timings(4, None)
        t["4/512/sdpa"] = t["4/512/exact"] / (1 + SDPA_MARGIN / 2)
        assert choose_max_cols(t, 4) is None
        t["4/512/sdpa"] = t["4/512/exact"] / (1 + 2 * SDPA_MARGIN)
        assert choose_max_cols(t, 4) == 0

    def test_the_margin_is_a_share_of_the_whole_pass(self):
        """With a whole pass timed, SDPA's attention must win by SDPA_MARGIN of that pass, not of the attention:
        3 ms saved of a 20 ms pass is a win, of a 40 ms pass not (the C++ kernel's native layer loop and the
        host's drift are shares of the pass)."""
        t = _timings(4, None)
        t["4/512/exact"], t["4/512/sdpa"] = 8.0, 5.0
        t["4/512/pass"] = 20.0
        assert choose_max_cols(t, 4) == 0
        t["4/512/pass"] = 40.0
        assert choose_max_cols(t, 4) is None
        assert sdpa_wins(8.0, 5.0, 20.0) and not sdpa_wins(8.0, 5.0, 40.0) and sdpa_wins(8.0, 5.0)

    def test_a_later_win_does_not_lift_the_limit(self):
        """A loss at 1,024 columns ends the limit at 512 even if the kernel wins again at 2,048."""
        t = _timings(4, None)
        t["4/1024/exact"] = 9.0
        assert choose_max_cols(t, 4) == 512


class TestMonotoneLimits:
    def test_a_smaller_row_count_gets_at_least_a_bigger_ones_limit(self):
        """16 rows measured at 1,024 columns while 32 rows kept the kernel everywhere: 16 rows get no limit
        either; 1 and 4 rows keep their own bigger limits, and 0 (never) is raised to 8 rows' 512."""
        got = monotone_limits(((1, None), (4, 0), (8, 512), (16, 1024), (32, None)))
        assert got == ((1, None), (4, None), (8, None), (16, None), (32, None))
        assert monotone_limits(((1, 2048), (4, 0), (8, 512), (32, 0))) == ((1, 2048), (4, 512), (8, 512), (32, 0))

    def test_limits_already_falling_with_rows_are_kept(self):
        """Limits that already fall as rows grow (the usual shape) come back unchanged."""
        limits = ((1, None), (4, None), (8, 2048), (16, 1024), (32, 0))
        assert monotone_limits(limits) == limits and monotone_limits(()) == ()

    @needs_lib
    def test_probe_and_cache_apply_it(self, tmp_path):
        """A probe whose 1-row timings lose at 512 columns while 4 rows win up to 1,024 stores 1,024 for both; a
        cache file written with a lower limit for fewer rows is read raised."""
        import json

        def timer(label, fn):
            arm, rows, cols = label
            wins = int(cols) <= (1024 if rows == 4 else 0)
            return 2.0 if arm == "sdpa" else (1.0 if wins else 3.0)
        plan = measure(_model(), (1, 4), tmp_path, timer=timer)
        assert plan.source == "probe" and plan.limits == ((1, 1024), (4, 1024))
        path = next(tmp_path.glob("attention-*.json"))
        raw = json.loads(path.read_text())
        raw["limits"] = [[1, 0], [4, 1024]]
        path.write_text(json.dumps(raw))
        assert measure(_model(), (1, 4), tmp_path, timer=timer).limits == ((1, 1024), (4, 1024))

def _routed(limits, batch_limits=()):
    """A tiny model with a stand-in library (routing only looks at whether one is set) and these limits."""
    model = load_model("tiny-random:0", "bfloat16")[0]
    model.exact_lib, model.exact_limits, model.exact_batch_limits = object(), limits, batch_limits
    return model


class TestExactFits:
    def test_first_row_limit_at_or_above_the_pass_decides(self):
        """exact_limits ((1, None), (4, 2048)): one row at any context, 2-4 rows up to 2,048 columns, longer passes SDPA."""
        model = _routed(((1, None), (4, 2048)))
        assert model.exact_fits(1, 100_000)
        assert model.exact_fits(3, 2048) and not model.exact_fits(3, 2049)
        assert not model.exact_fits(5, 10)

    def test_none_means_every_pass_and_no_library_none(self):
        """exact_limits None routes every pass to the kernel; without a library no pass goes there."""
        model = _routed(None)
        assert model.exact_fits(500, 100_000)
        model.exact_lib = None
        assert not model.exact_fits(1, 1)

    def test_batches_also_keep_the_built_limits(self):
        """A pass of several sequences takes the kernel within exact_batch_limits even past the measured one-sequence limit; one sequence does not."""
        model = _routed(((4, 512),), ((8, None),))
        assert not model.exact_fits(4, 600) and model.exact_fits(4, 600, batch=2)
        assert not model.exact_fits(9, 10, batch=2)


@needs_lib
class TestProbe:
    def test_fake_timings_set_the_limits_and_are_cached(self, tmp_path):
        """With injected timings every probed row count gets the last winning column count; a second start reads the cache and times nothing."""
        calls = []
        plan = install(_model(), (1, 4), True, tmp_path, fake_timer(calls, 1024))
        assert plan.source == "probe" and plan.limits == ((1, 1024), (4, 1024))
        assert {c[0] for c in calls} == {"pass", "exact", "sdpa"} and len(list(tmp_path.glob("attention-*.json"))) == 1
        again, model = [], _model()
        cached = install(model, (1, 4), True, tmp_path, fake_timer(again, 4096))
        assert again == [] and cached.source == "cache" and model.exact_limits == ((1, 1024), (4, 1024))

    def test_busy_host_is_not_cached(self, tmp_path, monkeypatch):
        """A probe whose threads got too little CPU is used for this run but not written to the cache."""
        monkeypatch.setattr("common.modeling.attention_probe.host_was_busy", lambda cpu_s, wall_s: True)
        plan = measure(_model(), (4,), tmp_path, timer=fake_timer([], 1024))
        assert plan.source == "probe-busy" and plan.limits == ((4, 1024),)
        assert list(tmp_path.glob("attention-*.json")) == []

    def test_real_passes_run_and_limits_are_restored(self):
        """Timing real forwards of the tiny model fills every (rows, columns, kernel) key and leaves the model's limits as they were."""
        model = _model()
        timings, complete = probe_timings(model, (1, 4), (64, 128), reps=1)
        assert complete and {f"{r}/64/{k}" for r in (1, 4) for k in ("exact", "sdpa")} <= set(timings)
        assert all(ms > 0 for ms in timings.values()) and model.exact_limits == ((4, 512),)

    def test_a_row_count_stops_at_the_first_sdpa_win(self):
        """Once SDPA wins at some column count, longer contexts are not timed for that row count (the limit is known)."""
        calls = []
        timings, complete = probe_timings(_model(), (1, 4), timer=fake_timer(calls, 1024))
        assert complete and {c[2] for c in calls} == {"512", "1024", "2048"}
        assert "4/4096/exact" not in timings and "4/2048/sdpa" in timings

    def test_attention_alone_is_timed_and_one_whole_pass_per_row_count(self):
        """Each row count times one whole pass (after the first column count) and then only attention calls, with
        PROBE_REPS runs of each kernel after a warm-up; the real closures run on the tiny model."""
        calls = []

        def timer(label, fn):
            calls.append(label)
            fn()
            return 2.0 if label[0] == "sdpa" else 1.0
        timings, complete = probe_timings(_model(), (1, 4), (64, 128), timer=timer)
        assert complete and [c for c in calls if c[0] == "pass"] == [("pass", 1, "64")] * (1 + PASS_REPS) + [
            ("pass", 4, "64")] * (1 + PASS_REPS)
        assert calls.count(("exact", 4, "128")) == calls.count(("sdpa", 4, "128")) == 1 + PROBE_REPS
        assert timings["4/64/pass"] == 1.0 and "4/128/pass" not in timings

    def test_an_sdpa_win_is_timed_twice(self):
        """Where SDPA wins, that (rows, columns) pair is timed a second round (warm-up and reps again) before the row count stops."""
        calls = []
        probe_timings(_model(), (4,), timer=fake_timer(calls, 1024), reps=2)
        assert [c[2] for c in calls].count("2048") == 2 * 2 * 3 and [c[2] for c in calls].count("1024") == 2 * 3

    def test_one_slow_round_of_the_kernel_does_not_stop_the_row_count(self):
        """A C++ kernel timed slow in the first round only (a slow phase of the host) keeps its limit: the second round's fastest counts."""
        seen = []

        def timer(label, fn):
            arm, _, cols = label
            seen.append(label)
            slow = arm == "exact" and cols == "1024" and seen.count(label) <= 1 + PROBE_REPS  # warm-up and reps
            return 2.0 if arm == "sdpa" else (3.0 if slow else 1.0)
        plan = measure(_model(), (4,), None, timer=timer)
        assert plan.limits == ((4, None),) and plan.timings["4/1024/exact"] == 1.0

    def test_out_of_time_keeps_the_built_limits_uncached(self, tmp_path):
        """A probe past its time budget leaves the model's limits as built and writes no cache file."""
        model = _model()
        plan = measure(model, (1, 4), tmp_path, timer=fake_timer([], 1024), budget_s=0.0)
        assert plan.source == "probe-incomplete" and plan.limits == ((4, 512),)
        assert list(tmp_path.glob("attention-*.json")) == []

    def test_fp32_model_is_not_probed(self, tmp_path):
        """An fp32 model (exactness checks, not the CPU serving dtype) keeps the limits it was built with."""
        model = load_model("tiny-random:0", "float32")[0]
        model.exact_lib, model.exact_limits = library(), ((4, 512),)
        assert install(model, (1, 4), True, tmp_path, fake_timer([], 0)) is None and model.exact_limits == ((4, 512),)

    def test_probe_off_or_every_pass_exact_keeps_the_model_as_built(self, tmp_path):
        """kernel_probe false, or a model that attends exactly in every pass (w4a8), is not probed."""
        model = _model()
        assert install(model, (1, 4), False, tmp_path, fake_timer([], 0)) is None and model.exact_limits == ((4, 512),)
        model.exact_limits = None
        assert install(model, (1, 4), True, tmp_path, fake_timer([], 0)) is None and model.exact_limits is None

    def test_measured_limits_route_the_passes(self, tmp_path, monkeypatch, exact_calls):
        """After a probe that found the kernel faster up to 1,024 columns (the model was built with 512), a 4-row pass after 600 columns runs the C++ kernel and one after 1,100 runs SDPA."""
        model = _model()
        install(model, (4,), True, tmp_path, fake_timer([], 1024))
        monkeypatch.setattr(model, "native", None)  # count the Python loop's attention calls
        cache = model.new_cache(1, 1200)
        slot = cache.allocate()
        tree = np.array([5, 6, 7], np.int64), np.array([-1, 0, 0], np.int32)
        for length in (600, 1100):
            cache.lengths[slot] = length  # contents do not matter for the routing
            forward_segments(model, cache, [slot], [[4]], [tree[0]], [tree[1]])
        assert len(exact_calls) == 1 and exact_calls[0][1].shape[-1] == 604

    def test_near_ties_are_judged_as_stored(self):
        """Timings that differ by less than the stored rounding count as a tie (a kernel win) both when the probe stops and when the limit is chosen, so no count is skipped."""
        def timer(label, fn):
            arm, _, cols = label
            return 2.0002 if arm == "exact" and int(cols) >= 1024 else 2.0
        plan = measure(_model(), (4,), None, timer=timer)
        assert plan.limits == ((4, None),) and "4/4096/exact" in plan.timings

    def test_model_shorter_than_every_count_keeps_its_limits(self):
        """A model whose positions end before the first column count is not timed and keeps its limits (source default)."""
        plan = measure(_model(), (4,), None, ladder=(100_000,), timer=fake_timer([], 0))
        assert plan.source == "default" and plan.limits == ((4, 512),) and plan.timings == {}

    def test_bad_rows_are_refused(self):
        """Row counts that are empty or not ascending raise ValueError naming them."""
        with pytest.raises(ValueError, match="rows"):
            measure(_model(), (4, 1), None, timer=fake_timer([], 0))


class TestPlanMetrics:
    def test_choices_and_timings_for_metrics(self):
        """A plan reports each row limit as exact (any context), exact_up_to_N_columns or sdpa (0), and its timings as attention/rows/kernel@columns."""
        plan = AttentionPlan(((1, None), (4, 2048), (8, 0)), {"8/512/exact": 3.0, "8/512/sdpa": 2.0})
        assert plan.choices() == [("attention", 1, "exact"), ("attention", 4, "exact_up_to_2048_columns"),
                                  ("attention", 8, "sdpa")]
        assert plan.metric_timings() == {"attention/8/exact@512": 3.0, "attention/8/sdpa@512": 2.0}
