"""KV memory budget of a worker: how many sequence slots fit, and memory reporting.

The pool holds ``slots x max_len`` tokens, ``max_len = max_model_len + tree headroom``
(KV rows for the tree nodes being drafted / verified past the committed prefix).
"""

from __future__ import annotations

import psutil
import torch

from common.config import Config
from common.modeling.kv_cache import KVCache
from common.modeling.model import DecoderModel


class MemoryBudgetError(RuntimeError):
    """The KV budget cannot hold even one sequence; the message names the keys to change."""


def available_bytes(device: str) -> int:
    """Free memory on ``device`` (bytes): CUDA free memory, or the host's available RAM."""
    if device.startswith("cuda"):
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    return int(psutil.virtual_memory().available)


def memory_usage(device: str) -> tuple[int, int]:
    """(used, total) bytes: this process's CUDA reservation / device total, or RSS / RAM."""
    if device.startswith("cuda"):
        dev = torch.device(device)
        return int(torch.cuda.memory_reserved(dev)), int(torch.cuda.get_device_properties(dev).total_memory)
    return int(psutil.Process().memory_info().rss), int(psutil.virtual_memory().total)


def kv_budget(cfg: Config) -> int:
    """KV bytes per worker: ``kv_memory_bytes`` if set, else ``kv_memory_fraction`` of available memory."""
    return cfg.kv_memory_bytes or int(cfg.kv_memory_fraction * available_bytes(cfg.device))


def plan_prefix_blocks(cfg: Config, model: DecoderModel, slots: int, max_len: int) -> int:
    """Prefix-cache blocks for ``model`` (0 when ``prefix_cache`` is off).

    The pool takes what the KV budget leaves after ``slots x max_len`` slot rows, but at
    most as many tokens as the slots hold (the pool is allocated lazily: its pages are
    only touched as blocks get stored).
    """
    if not cfg.prefix_cache:
        return 0
    s = model.spec
    per_token = KVCache.bytes_per_token(s.num_layers, model._local_kv(), s.head_dim, model.dtype)
    per_block = per_token * cfg.prefix_cache_block_size
    left = kv_budget(cfg) - slots * max_len * per_token
    return int(max(0, min(left // per_block, slots * max_len // cfg.prefix_cache_block_size)))


def plan_slots(cfg: Config, model: DecoderModel, headroom_tokens: int) -> tuple[int, int]:
    """(slots, max_len tokens) for ``model``'s KV pool.

    Budget: ``kv_memory_bytes`` if set, else ``kv_memory_fraction`` of available memory.
    Slots are capped at ``max_running``. Raises MemoryBudgetError when not even one
    sequence of ``max_model_len + headroom_tokens`` tokens fits.
    """
    s = model.spec
    max_len = cfg.max_model_len + headroom_tokens
    per_token = KVCache.bytes_per_token(s.num_layers, model._local_kv(), s.head_dim, model.dtype)
    per_slot = per_token * max_len
    budget = kv_budget(cfg)
    slots = min(cfg.max_running, budget // per_slot)
    if slots < 1:
        raise MemoryBudgetError(
            f"KV budget of {budget} bytes cannot hold one sequence of {max_len} tokens ({per_slot} bytes): "
            f"lower max_model_len or raise kv_memory_bytes / kv_memory_fraction")
    return int(slots), max_len
