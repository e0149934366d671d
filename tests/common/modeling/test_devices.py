"""Device ids a worker reports for overlap = auto; the hot paths' one host transfer; the sync before a timing."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from common.modeling.devices import device_ids, synchronize, to_host


def test_cpu_is_one_shared_id():
    """Every CPU worker reports ["cpu"], so auto never overlaps two CPU workers."""
    assert device_ids("cpu") == ["cpu"] and device_ids("cpu", 2) == ["cpu"]


def test_cuda_ids_are_gpu_uuids(monkeypatch):
    """On CUDA each device is named by its GPU UUID (stable across containers), starting
    at the configured index."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(uuid=f"u{i}"))
    assert device_ids("cuda") == ["GPU-u0"]
    assert device_ids("cuda:1", 2) == ["GPU-u1", "GPU-u2"]


def test_cuda_without_uuid_falls_back_to_index(monkeypatch):
    """Without a UUID attribute the id is cuda:N."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace())
    assert device_ids("cuda:3") == ["cuda:3"]


class TestToHost:
    def test_round_trips_shapes_and_dtypes(self):
        """Several tensors come back as numpy arrays of their shapes, dtypes and values."""
        ids = torch.tensor([[151935, 3], [0, 7]])
        lp = torch.tensor([-0.25, -3.5], dtype=torch.float32)
        a, b = to_host([ids, lp])
        assert a.dtype == np.int64 and a.tolist() == [[151935, 3], [0, 7]]
        assert b.dtype == np.float32 and b.tolist() == [-0.25, -3.5]
        assert to_host([]) == []


GUARDED = ("numpy", "item", "tolist", "cpu", "__int__", "__float__", "__bool__", "__index__")


@pytest.fixture
def no_host_transfers(monkeypatch):
    """Makes every Tensor host read but ``to_host``'s fail while the test body runs; the
    CPU-only shortcuts (``sampling.reads_are_free``) are off, so the code an accelerator
    runs is what is checked."""
    from common.modeling import sampling

    def refuse(name):
        def method(self, *args, **kwargs):
            raise AssertionError(f"host transfer Tensor.{name} outside to_host")
        return method
    monkeypatch.setattr(sampling, "reads_are_free", lambda t: False)
    for name in GUARDED:
        monkeypatch.setattr(torch.Tensor, name, refuse(name))
    yield
    monkeypatch.undo()


class TestHotPathsUseOneTransfer:
    def test_guard_catches_a_transfer(self, no_host_transfers):
        """The guard is armed: a stray .item() fails."""
        with pytest.raises(AssertionError):
            torch.zeros(1).item()

    def test_verifier_and_draft_steps(self, tiny_main, tiny_noisy_draft, no_host_transfers):
        """A draft step and a verify step (greedy and sampled with top-k/top-p, penalties,
        min_tokens bans and logprobs) read data back only through to_host."""
        from common import wire
        from services.draft.runner import DraftRunner
        from services.verifier.runner import VerifierRunner
        draft, verifier = DraftRunner(tiny_noisy_draft, 2, 64), VerifierRunner(tiny_main, 2, 64)
        prompt = [5, 17, 300, 42]
        params = {"g": wire.SamplingParams(logprobs=2, presence_penalty=0.5, min_tokens=3, stop_token_ids=[9]),
                  "s": wire.SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=1, logprobs=0)}
        dres = draft.step(wire.DraftStep(round=1, seqs=[
            wire.DraftSeq(seq_id=k, prefix_len=0, new_tokens=prompt, tree_size=8, max_depth=3,
                          temperature=p.temperature, top_p=p.top_p, top_k=p.top_k) for k, p in params.items()]))
        vres = verifier.step(wire.VerifyStep(round=1, seqs=[
            wire.VerifySeq(seq_id=k, prefix_len=0, new_tokens=prompt, tree=dres.trees[k], params=p, seed=3,
                           history=[1, 2], banned=[9], ban_depth=2) for k, p in params.items()]))
        assert set(vres.outs) == {"g", "s"} and not vres.lost
        assert len(vres.outs["g"].logprobs) == len(vres.outs["g"].accepted) + 1


def test_synchronize_waits_only_on_cuda(monkeypatch):
    """synchronize calls torch.cuda.synchronize for a CUDA device and nothing for the CPU."""
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    synchronize("cpu")
    assert calls == []
    synchronize("cuda:1")
    assert calls == ["cuda:1"]
