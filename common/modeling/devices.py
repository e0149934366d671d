"""Physical identities of the devices a worker computes on (for ``overlap = auto``)."""

from __future__ import annotations

import torch


def device_ids(device: str, count: int = 1) -> list[str]:
    """Ids of ``count`` devices starting at ``device`` (``cpu``, ``cuda``, ``cuda:N``).

    On CUDA each id is the GPU's UUID (``GPU-…``), which stays the same whichever index a
    container sees it under, so the scheduler can tell whether two workers share a GPU;
    ``cuda:N`` when the UUID is not available. Anything else is ``["cpu"]``.
    """
    if not device.startswith("cuda"):
        return ["cpu"]
    first = int(device.split(":")[1]) if ":" in device else 0
    ids = []
    for idx in range(first, first + count):
        uuid = getattr(torch.cuda.get_device_properties(idx), "uuid", None) if torch.cuda.is_available() else None
        ids.append(f"GPU-{uuid}" if uuid is not None else f"cuda:{idx}")
    return ids
