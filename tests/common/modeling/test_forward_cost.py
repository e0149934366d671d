"""The shared batched forward's cost measurement (the verify/draft cost curves for tree_size auto)."""

import pytest
import torch

from common.modeling import runner
from common.modeling.model import DecoderModel
from common.modeling.tiny import tiny_spec, tiny_weights


@pytest.fixture(scope="module")
def model():
    spec = tiny_spec(vocab_size=512)
    return DecoderModel(spec, tiny_weights(spec, seed=3), torch.float32)


def test_curve_covers_the_grid_that_fits_and_frees_its_slot(model):
    """One positive time per grid size that fits after the prefix (64 tokens by default), in grid
    order, and the scratch slot is free again afterwards."""
    cache = model.new_cache(1, runner.COST_PREFIX + 16)
    curve = runner.measure_forward_ms(model, cache, grid=(1, 4, 16, 32), reps=2)
    assert [t for t, _ in curve] == [1, 4, 16]
    assert all(ms > 0 for _, ms in curve)
    assert cache.allocate() == 0  # the only slot was given back
    cache.free(0)
    assert [t for t, _ in runner.measure_forward_ms(model, cache, (1, 8, 16), 1, prefix_len=70)] == [1, 8]


def test_every_timed_pass_waits_for_the_device(model, monkeypatch):
    """Each timed pass is bracketed by a sync of the model's device, so on a GPU the clock
    covers the kernels rather than their launches."""
    calls = []
    monkeypatch.setattr(runner, "synchronize", lambda device: calls.append(device))
    runner.measure_forward_ms(model, model.new_cache(1, 128), grid=(1, 8), reps=3)
    assert calls == ["cpu"] * (2 * 3 * 2)


def test_runs_take_turns_over_the_grid(model, monkeypatch):
    """The timed passes go 1, 4, 8, 1, 4, 8 (every size once, then again), and each size keeps its fastest run."""
    sizes = []
    real = runner.forward_segments

    def spy(m, cache, slots, pending, tokens, parents):
        sizes.append(1 + len(tokens[0]))
        return real(m, cache, slots, pending, tokens, parents)
    monkeypatch.setattr(runner, "forward_segments", spy)
    ms = [5.0, 9.0, 7.0, 3.0, 9.5, 2.0]  # the passes' durations on the fake clock, in the order they run
    stamps = iter([x for i, d in enumerate(ms) for x in (float(i), i + d / 1e3)])
    curve = runner.measure_forward_ms(model, model.new_cache(1, 128), grid=(1, 4, 8), reps=2,
                                      clock=lambda: next(stamps))
    assert sizes[1:] == [1, 4, 8, 1, 4, 8]  # after the prefix's prefill
    assert [t for t, _ in curve] == [1, 4, 8] and [m for _, m in curve] == pytest.approx([3.0, 9.0, 2.0])
