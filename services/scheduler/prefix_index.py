"""Cache-aware placement: what each worker's prefix cache probably holds. Pure, torch-free.

The scheduler keeps, per worker, an approximate LRU set of the chained block keys
(``common.prefix_hash``) of the sequences it placed there — their prompt when placed,
prompt + output when freed (the worker retains a sequence's blocks on Free). It is
approximate (the worker may have evicted blocks; a lookup miss only costs a prefill) and
bounded by the worker's reported pool size. A restarted worker registers anew and starts
with an empty index, as its cache is cold.

Placement (SGLang router's cache-aware policy, simplified): among workers with a free slot
whose load is within ``slack`` sequences of the least loaded one, take the one holding the
longest matching prefix; with no match anywhere, the least loaded.
"""

from __future__ import annotations

from collections import OrderedDict

DEFAULT_CAPACITY = 1 << 16  # blocks remembered per worker until it reports its pool size


class PrefixIndex:
    """Approximate set of block keys held by one worker, least recently placed first."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._keys: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, keys: list[int]) -> None:
        """Record a chain as held (refreshed child first, so heads outlive tails); drop the
        least recent keys beyond ``capacity``."""
        for key in reversed(keys):
            self._keys[key] = None
            self._keys.move_to_end(key)
        while len(self._keys) > self.capacity:
            self._keys.popitem(last=False)

    def match(self, keys: list[int]) -> int:
        """Blocks of the leading run of ``keys`` this worker probably holds."""
        n = 0
        for key in keys:
            if key not in self._keys:
                break
            n += 1
        return n

    def resize(self, capacity: int) -> None:
        """Follow the worker's reported pool size (blocks); 0 keeps the current bound."""
        if capacity > 0 and capacity != self.capacity:
            self.capacity = capacity
            self.add([])


def choose(candidates: list, load, match, slack: int):
    """The worker to place on: among ``candidates`` with ``load(w)`` at most ``slack`` above
    the minimum, the longest ``match(w)`` (ties: lower load, then the given order); None
    when there are no candidates."""
    if not candidates:
        return None
    least = min(load(w) for w in candidates)
    near = [w for w in candidates if load(w) <= least + slack]
    return min(near, key=lambda w: (-match(w), load(w)))
