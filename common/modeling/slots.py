"""Sequence id -> KV slot bookkeeping for a worker (draft or verifier), with prefix reuse."""

from __future__ import annotations

import msgspec

from common.modeling.kv_cache import CacheFullError, KVCache
from common.modeling.prefix_cache import PrefixCache


class SlotTable:
    """Maps the scheduler's sequence ids to this worker's KV slots.

    A worker holds no request state beyond this: if it does not hold a sequence at the
    prefix length the scheduler expects, the sequence is reported *lost* and the
    scheduler re-sends it from position 0 (re-prefill).

    With a :class:`PrefixCache` (``prefix``), a sequence sent from position 0 first reuses
    the longest cached prefix of its tokens: ``resolve`` returns its entry rewritten to
    start after the reused rows (``prefix_len = n``, ``new_tokens[n:]``), so runners
    prefill only the rest. The table records each sequence's committed tokens
    (``extend``, called by the runner after its commit) so that the prompt's blocks are
    retained after its first step and the whole sequence's blocks when it is freed.
    """

    def __init__(self, cache: KVCache, vocab_size: int, prefix: PrefixCache | None = None) -> None:
        self.cache = cache
        self.vocab_size = vocab_size
        self.prefix = prefix
        self._slots: dict[str, int] = {}
        self._tokens: dict[str, list[int]] = {}  # committed tokens, rows [0, len) of the slot
        self._fresh: set[str] = set()  # sequences prefilled in the current step

    def slot(self, seq_id: str) -> int:
        return self._slots[seq_id]

    def __len__(self) -> int:
        return len(self._slots)

    def resolve(self, seqs: list) -> tuple[list, list[str]]:
        """Split step entries (with ``seq_id``, ``prefix_len``, ``new_tokens``) into those
        this worker can serve and the ids it must report lost (unknown sequence, prefix
        mismatch, or no free slot / no room). Served entries of new sequences may come back
        rewritten to skip a reused cached prefix."""
        ok, lost, seen = [], [], set()
        self._fresh.clear()
        for s in seqs:
            if s.seq_id in seen or not self._valid_tokens(s.new_tokens):
                lost.append(s.seq_id)  # a repeated id or out-of-vocabulary tokens: never served
                continue
            seen.add(s.seq_id)
            slot = self._slots.get(s.seq_id)
            if slot is not None and self.cache.lengths[slot] != s.prefix_len:
                if s.prefix_len < self.cache.lengths[slot]:
                    self.cache.truncate(slot, s.prefix_len)
                    del self._tokens[s.seq_id][s.prefix_len:]
                else:
                    self.free([s.seq_id], keep=False)
                    slot = None
            if slot is None and s.prefix_len == 0:
                slot = self._allocate(s.seq_id)
            if slot is None or self.cache.lengths[slot] + len(s.new_tokens) > self.cache.max_len - 1:
                lost.append(s.seq_id)
                continue
            if s.prefix_len == 0:
                s = self._reuse(s, slot)
            ok.append(s)
        return ok, lost

    def _allocate(self, seq_id: str) -> int | None:
        try:
            slot = self._slots[seq_id] = self.cache.allocate()
        except CacheFullError:
            return None
        self._tokens[seq_id] = []
        return slot

    def _reuse(self, s, slot: int):
        """Load the longest cached prefix of a sequence sent from position 0."""
        self._fresh.add(s.seq_id)
        n = self.prefix.load(self.cache, slot, s.new_tokens) if self.prefix is not None else 0
        self._tokens[s.seq_id] = list(s.new_tokens[:n])
        return msgspec.structs.replace(s, prefix_len=n, new_tokens=s.new_tokens[n:]) if n else s

    def extend(self, seq_id: str, tokens: list[int]) -> None:
        """Record tokens just committed to ``seq_id``'s KV rows; after a sequence's first
        step its (prompt) blocks are retained in the prefix cache."""
        committed = self._tokens[seq_id]
        committed.extend(tokens)
        if seq_id in self._fresh and self.prefix is not None:
            self.prefix.store(self.cache, self._slots[seq_id], committed)

    def _valid_tokens(self, tokens: list[int]) -> bool:
        return all(0 <= t < self.vocab_size for t in tokens)

    def seq_ids(self) -> list[str]:
        """Every sequence holding a slot here."""
        return list(self._slots)

    def free(self, seq_ids: list[str], keep: bool = True) -> None:
        """Release slots (unknown ids are ignored); with ``keep`` the sequences' committed
        blocks are retained in the prefix cache first (not after a failed step)."""
        for sid in seq_ids:
            slot = self._slots.pop(sid, None)
            tokens = self._tokens.pop(sid, [])
            if slot is None:
                continue
            if keep and self.prefix is not None and len(tokens) <= self.cache.lengths[slot]:
                self.prefix.store(self.cache, slot, tokens)
            self.cache.free(slot)
