"""The start-up kernel probe: fake timings in, plan out; cache keying; probe off."""

import json

import torch

from common.modeling.kernel_probe import (DROP_RATIO, DROP_TREND, HEAD, HEAD_MAX_ROWS, KernelPlan, install, losing,
                                          make_plan, plan_key, probe_timings)
from common.modeling.kernels import ROW_BUCKETS, PlannedWeight, _onednn_bf16_available
from common.modeling.loader import load_model
from common.modeling.quant import quantize_weights

CAP = 4  # buckets up to this many rows are "fast" for the fake FAST kernel
# oneDNN where its bf16 path runs (AVX512 BW/VL/DQ); treespec's packed kernel on AVX2-only CPUs (CI has g++)
FAST = "onednn" if _onednn_bf16_available() else "packed"


def fake_timer(calls: list):
    """FAST 1 ms up to CAP rows and 9 ms above; every other kernel 5 ms; records labels."""
    def timer(label, fn):
        calls.append(label)
        _, rows, kernel = label
        return (1.0 if rows <= CAP else 9.0) if kernel == FAST else 5.0
    return timer


def _model(dtype="bfloat16"):
    return load_model("tiny-random:0", dtype)[0]


class TestProbe:
    def test_fake_timer_decides_the_plan(self, tmp_path):
        """With injected timings the plan takes FAST up to CAP rows and the default above, for layers and head."""
        model = _model()
        plan = install(model, True, tmp_path, fake_timer([]))
        assert plan.source == "probe"
        assert plan.ladders["bfloat16"] == ((CAP, FAST), (ROW_BUCKETS[-1], "linear"))
        assert plan.ladders[HEAD] == ((CAP, FAST), (HEAD_MAX_ROWS, "linear"))
        assert isinstance(model.w["layers.1.gate_up.weight"], PlannedWeight)
        assert isinstance(model.head_weight, PlannedWeight)
        assert ("bfloat16", CAP, FAST) in plan.choices() and ("bfloat16", 32, "linear") in plan.choices()

    def test_int4_draft_gets_a_ladder(self, tmp_path):
        """An int4 draft (with its bf16 copy) gets an int4-format ladder: FAST up to CAP rows (oneDNN on the bf16
        copy, or the packed codes), int4 above."""
        from common.modeling.model import DecoderModel
        base = _model()
        draft = DecoderModel(base.spec, quantize_weights(dict(base.w), keep_dense=True), base.dtype)
        ref = DecoderModel(base.spec, dict(draft.w), base.dtype)
        plan = install(draft, True, tmp_path, fake_timer([]))
        assert plan.ladders["int4"] == ((CAP, FAST), (ROW_BUCKETS[-1], "int4"))
        assert isinstance(draft.w["layers.0.qkv.weight"], PlannedWeight)
        x = torch.randn(8, base.spec.hidden_size).to(torch.bfloat16)
        w, own = draft.w["layers.0.o.weight"], ref.w["layers.0.o.weight"]
        # oneDNN runs the kept bf16 copy; the packed kernel the int4 codes, as the int4 kernel does
        want = (torch.nn.functional.linear(x[:3], own.dense) if FAST == "onednn" else own.linear(x[:3])).float()
        assert (w.linear(x[:3]).float() - want).abs().max() <= 0.02 * want.abs().max()
        assert torch.equal(w.linear(x), own.linear(x))  # 8 rows: the int4 kernel, as Int4Weight runs it

    def test_timings_scale_to_one_pass(self):
        """A format's time is one timed run of layer 0's projections together times the layer count; the head's once."""
        model = _model()
        t = probe_timings(model.w, model.head_weight, model.spec.num_layers, fake_timer([]), reps=1)
        assert t[("bfloat16", 1, "linear")] == 5.0 * model.spec.num_layers
        assert t[(HEAD, 1, FAST)] == 1.0

    def test_a_kernel_falling_further_behind_is_not_timed_at_bigger_buckets(self):
        """A kernel 2x the fastest at 1 row and 6x at 4 rows (F.linear against the packed kernel on an AVX2-only
        host) is not timed from 8 rows on; the others still are, and the plan keeps the fastest."""
        model = _model()
        calls: list = []

        def timer(label, fn):
            calls.append(label)
            _, rows, kernel = label
            return 1.0 if kernel == FAST else (2.0 if rows == 1 else 6.0)
        t = probe_timings(model.w, model.head_weight, 2, timer, reps=1)
        assert ("bfloat16", 4, "linear") in t and ("bfloat16", 8, "linear") not in t
        assert {r for f, r, k in t if f == "bfloat16" and k == FAST} == set(ROW_BUCKETS)
        assert not any(rows > 4 and kernel == "linear" for _, rows, kernel in calls)

    def test_a_kernel_closing_in_is_kept(self):
        """Far behind but closing in as rows grow (oneDNN's int4 path on the AMX host: 4.0x, 3.3x, ...), or
        behind by no more than DROP_RATIO, a kernel stays; the first bucket drops nothing."""
        ratios = {"packed": 1.0, "onednn": 4.0}
        assert losing({"packed": 1.0, "onednn": 4.0}, {}) == (set(), ratios)
        assert losing({"packed": 1.0, "onednn": 3.3}, ratios)[0] == set()
        assert losing({"packed": 1.0, "onednn": DROP_RATIO}, {"onednn": 1.0})[0] == set()
        assert losing({"packed": 1.0, "onednn": 4.0 * DROP_TREND}, ratios)[0] == {"onednn"}

    def test_budget_stops_probing(self):
        """Past the time budget no further row bucket is probed."""
        model = _model()
        calls: list = []
        t = probe_timings(model.w, model.head_weight, 2, fake_timer(calls), budget_s=0.0)
        assert t == {} and calls == []

    def test_incomplete_probe_keeps_defaults_uncached(self, tmp_path):
        """A probe cut short before timing anything keeps the default kernels and caches nothing."""
        m = _model()
        plan = make_plan(m.w, m.head_weight, m.spec.num_layers, tmp_path, fake_timer([]), budget_s=0.0)
        assert plan.source == "probe-incomplete" and plan.ladders == {} and list(tmp_path.iterdir()) == []

    def test_a_probe_cut_short_uses_the_buckets_it_timed_uncached(self, tmp_path, monkeypatch):
        """A probe whose budget ends after its first bucket runs the kernel that bucket measured fastest
        (for every row count), keeps the default for formats it never timed, and caches nothing."""
        import common.modeling.kernel_probe as kp

        class Clock:  # one second per timed run: the 1 s budget ends inside the first bucket
            now = 0.0
            perf_counter = process_time = staticmethod(lambda: Clock.now)

        def timer(label, fn):
            Clock.now += 1.0
            return fake_timer([])(label, fn)

        monkeypatch.setattr(kp, "time", Clock)
        m = _model()
        plan = make_plan(m.w, m.head_weight, m.spec.num_layers, tmp_path, timer, budget_s=1.0)
        assert plan.source == "probe-incomplete" and list(tmp_path.iterdir()) == []
        assert plan.ladders == {"bfloat16": ((1, FAST),)}  # the head, never timed, keeps its default

    def test_probed_model_gives_the_same_logits(self, tmp_path):
        """A model on the chosen kernels computes the same forward as on the defaults (float rounding aside)."""
        from common.modeling.kv_cache import KVCache  # noqa: F401 (cache through the model)
        ref, fast = _model(), _model()
        install(fast, True, tmp_path, fake_timer([]))
        tokens = torch.tensor([[1, 2, 3, 4, 5]])
        pos = torch.arange(5)[None]
        mask = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]
        outs = []
        for m in (ref, fast):
            cache = m.new_cache(1, 16)
            slot = cache.allocate()
            outs.append(m.logits(m.forward(tokens, pos, cache, [slot], mask)[0]))
        assert (outs[0] - outs[1]).abs().max() <= 0.02 * outs[0].abs().max()  # bf16 rounding
        assert torch.equal(outs[0].argmax(-1), outs[1].argmax(-1))


class TestCache:
    def test_second_start_reads_the_cache(self, tmp_path):
        """A second start with the same host and shapes reads the plan without timing anything."""
        install(_model(), True, tmp_path, fake_timer([]))
        calls: list = []
        plan = install(_model(), True, tmp_path, fake_timer(calls))
        assert plan.source == "cache" and calls == []
        assert plan.ladders["bfloat16"] == ((CAP, FAST), (ROW_BUCKETS[-1], "linear"))

    def test_key_follows_shapes_formats_and_threads(self, monkeypatch):
        """The cache key changes with the weight shapes, the weight format, the thread count and the CPU model."""
        m = _model()
        key = plan_key(m.w, m.head_weight, 2)
        assert key == plan_key(m.w, m.head_weight, 2)
        assert key != plan_key(m.w, m.head_weight, 3)
        assert key != plan_key(m.w, None, 2)
        quant = quantize_weights(dict(m.w), keep_dense=True)
        assert key != plan_key(quant, m.head_weight, 2)
        monkeypatch.setattr(torch, "get_num_threads", lambda: 99)
        assert key != plan_key(m.w, m.head_weight, 2)
        monkeypatch.undo()
        monkeypatch.setattr("common.modeling.kernel_probe.cpu_model", lambda: "Other CPU")
        assert key != plan_key(m.w, m.head_weight, 2)

    def test_corrupt_cache_file_is_measured_again(self, tmp_path):
        """An unreadable cache file is replaced by a fresh probe, not an error."""
        m = _model()
        path = tmp_path / f"kernels-{plan_key(m.w, m.head_weight, m.spec.num_layers)}.json"
        path.write_text("{not json")
        plan = make_plan(m.w, m.head_weight, m.spec.num_layers, tmp_path, fake_timer([]))
        assert plan.source == "probe" and json.loads(path.read_text())["ladders"]

    def test_unwritable_cache_dir_still_starts(self, tmp_path):
        """A cache directory that cannot be written (a read-only models volume in a
        container; here a path under a regular file) still gives a measured plan: the write
        failure is logged, not raised."""
        blocker = tmp_path / "models"
        blocker.write_text("a file, not a directory")
        m = _model()
        plan = make_plan(m.w, m.head_weight, m.spec.num_layers, blocker / "kernel-plans", fake_timer([]))
        assert plan.source == "probe" and plan.ladders and blocker.read_text() == "a file, not a directory"


class TestProbeOff:
    def test_fp32_model_times_nothing(self, tmp_path):
        """An fp32 model has nothing to choose: no kernel is timed and no weight is wrapped."""
        calls: list = []
        model = _model("float32")
        plan = install(model, True, tmp_path, fake_timer(calls))
        assert calls == [] and plan.ladders == {} and isinstance(model.head_weight, torch.Tensor)

    def test_probe_off_keeps_default_kernels(self, tmp_path):
        """kernel_probe = false: nothing is timed, no weight is wrapped, no cache file is written."""
        model = _model()
        calls: list = []
        plan = install(model, False, tmp_path, fake_timer(calls))
        assert plan == KernelPlan() and calls == [] and list(tmp_path.iterdir()) == []
        assert isinstance(model.w["layers.0.qkv.weight"], torch.Tensor) and model.kernel_plan is plan

    def test_config_key_defaults_on(self):
        """Config kernel_probe is on by default and accepts false."""
        from common.config import Config, load_config
        assert Config().kernel_probe is True
        assert load_config(overrides={"kernel_probe": "false"}).kernel_probe is False


class TestBusyHost:
    def test_contended_probe_is_used_but_not_cached(self, tmp_path):
        """A probe whose threads got too little CPU (another process ran) still gives this run its plan
        but writes no cache file, so the next start measures again."""
        m = _model()
        plan = make_plan(m.w, m.head_weight, m.spec.num_layers, tmp_path, fake_timer([]),
                         contended=lambda cpu_s, wall_s: True)
        assert plan.source == "probe-busy" and plan.ladders and list(tmp_path.iterdir()) == []

    def test_cpu_share_threshold(self):
        """2 s of wall time with 0.5 s of CPU on the torch threads is busy; full CPU or a probe under 1 s is not."""
        from common.modeling.kernel_probe import host_was_busy
        threads = torch.get_num_threads()
        assert host_was_busy(0.5, 2.0)
        assert not host_was_busy(2.0 * threads, 2.0)
        assert not host_was_busy(0.0, 0.5)
