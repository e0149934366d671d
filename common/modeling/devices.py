"""Physical identities of the devices a worker computes on (for ``overlap = auto``),
the hot paths' one device-to-host transfer (``to_host``) and the sync before a timing
(``synchronize``)."""

from __future__ import annotations

import numpy as np
import torch


def synchronize(device: str | torch.device) -> None:
    """Wait until every kernel queued on ``device`` has run (no-op off CUDA).

    A wall-clock timing of GPU work reads the clock only after this: kernel launches
    return before the kernels run, so without it a timing measures launch cost.
    """
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


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


_TENSOR_TO = torch.Tensor.to  # bound at import: a test's transfer guard patches the Tensor methods
_TENSOR_NUMPY = torch.Tensor.numpy
NUMPY_DTYPES = {torch.int64: np.int64, torch.int32: np.int32, torch.float32: np.float32,
                torch.float64: np.float64, torch.bool: np.bool_}


def to_host(tensors: list[torch.Tensor]) -> list[np.ndarray]:
    """The one device-to-host transfer of the draft and verifier hot paths.

    Packs ``tensors`` (any shapes; int64 ids below 2**53, float32 scores, bool) into one
    float64 vector on their device, copies it to the host once (one sync on an
    accelerator), and returns numpy arrays of the original shapes and dtypes. Every other
    host read in a step is a bug on GPU (a test patches ``Tensor.numpy``/``item``/... to
    fail during steps). Raises KeyError for a dtype not in ``NUMPY_DTYPES``.
    """
    if not tensors:
        return []
    flat = torch.cat([t.reshape(-1).to(torch.float64) for t in tensors])
    host = _TENSOR_NUMPY(_TENSOR_TO(flat, "cpu"))
    out, start = [], 0
    for t in tensors:
        n = t.numel()
        out.append(host[start:start + n].reshape(tuple(t.shape)).astype(NUMPY_DTYPES[t.dtype]))
        start += n
    return out
