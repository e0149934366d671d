"""Device ids a worker reports for overlap = auto."""

from types import SimpleNamespace

import torch

from common.modeling.devices import device_ids


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
