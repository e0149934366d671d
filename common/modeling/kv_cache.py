"""Slot-based KV cache shared by the draft worker and the tree verifier.

Each sequence owns one *slot*: a ``[max_len]`` strip of key/value rows per layer. Rows
``[0, length)`` are the committed prefix; tree nodes are written after it during a
forward pass and either committed (the accepted path is copied into the contiguous
prefix, as in EAGLE / Medusa) or dropped by rolling ``length`` back.
"""

from __future__ import annotations

import torch


class CacheFullError(RuntimeError):
    """No free slot, or a sequence would grow past the slot's capacity."""


class KVCache:
    """Preallocated key/value storage.

    Tensors ``k``/``v``: ``[layers, slots, max_len, kv_heads, head_dim]`` in ``dtype``.
    ``lengths[s]`` (tokens) is the committed prefix length of slot ``s``.
    Memory: ``2 * layers * slots * max_len * kv_heads * head_dim * itemsize`` bytes.
    """

    def __init__(self, layers: int, slots: int, max_len: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: str | torch.device = "cpu") -> None:
        if slots < 1 or max_len < 1:
            raise ValueError(f"KVCache needs slots >= 1 and max_len >= 1, got {slots}, {max_len}")
        shape = (layers, slots, max_len, kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.max_len = max_len
        self.lengths = [0] * slots
        self._free = list(range(slots - 1, -1, -1))

    @staticmethod
    def bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        """Bytes of K+V for one token across all layers."""
        return 2 * layers * kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()

    @property
    def num_slots(self) -> int:
        return len(self.lengths)

    @property
    def slots_used(self) -> int:
        return self.num_slots - len(self._free)

    def allocate(self) -> int:
        """Take a free slot (length 0). Raises CacheFullError when none is free."""
        if not self._free:
            raise CacheFullError(f"all {self.num_slots} KV slots are in use")
        slot = self._free.pop()
        self.lengths[slot] = 0
        return slot

    def free(self, slot: int) -> None:
        """Return ``slot`` to the pool (idempotent)."""
        if slot not in self._free:
            self.lengths[slot] = 0
            self._free.append(slot)

    def check_room(self, slot: int, extra: int) -> None:
        """Raise CacheFullError if ``extra`` more rows do not fit after the prefix."""
        if self.lengths[slot] + extra > self.max_len:
            raise CacheFullError(
                f"slot {slot}: {self.lengths[slot]} + {extra} tokens exceeds max_len {self.max_len}")

    def write(self, layer: int, slot: int, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store rows ``[start, start + t)``; ``k``/``v``: ``[t, kv_heads, head_dim]``.

        Rows past ``max_len`` are dropped: in a padded batch they are padding (``check_room``
        guarantees that every real row fits)."""
        t = max(0, min(k.shape[0], self.max_len - start))
        self.k[layer, slot, start:start + t] = k[:t]
        self.v[layer, slot, start:start + t] = v[:t]

    def commit(self, slot: int, rows: list[int]) -> None:
        """Append rows (absolute indices >= length, ascending) to the committed prefix.

        Copies each row's K/V down to ``length, length + 1, ...`` in every layer and
        advances ``length``; rows already in place are not copied.
        """
        base = self.lengths[slot]
        if rows != sorted(rows) or (rows and rows[0] < base):
            raise ValueError(f"commit rows must ascend from the prefix end {base}: {rows}")
        dst = list(range(base, base + len(rows)))
        if rows != dst:
            src_t = torch.tensor(rows, device=self.k.device)
            dst_t = torch.tensor(dst, device=self.k.device)
            self.k[:, slot, dst_t] = self.k[:, slot, src_t]
            self.v[:, slot, dst_t] = self.v[:, slot, src_t]
        self.lengths[slot] = base + len(rows)

    def truncate(self, slot: int, length: int) -> None:
        """Roll the committed prefix back to ``length`` tokens."""
        if not 0 <= length <= self.lengths[slot]:
            raise ValueError(f"cannot truncate slot {slot} of length {self.lengths[slot]} to {length}")
        self.lengths[slot] = length
