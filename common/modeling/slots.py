"""Sequence id -> KV slot bookkeeping for a worker (draft or verifier)."""

from __future__ import annotations

from common.modeling.kv_cache import CacheFullError, KVCache


class SlotTable:
    """Maps the scheduler's sequence ids to this worker's KV slots.

    A worker holds no request state beyond this: if it does not hold a sequence at the
    prefix length the scheduler expects, the sequence is reported *lost* and the
    scheduler re-sends it from position 0 (re-prefill).
    """

    def __init__(self, cache: KVCache, vocab_size: int) -> None:
        self.cache = cache
        self.vocab_size = vocab_size
        self._slots: dict[str, int] = {}

    def slot(self, seq_id: str) -> int:
        return self._slots[seq_id]

    def __len__(self) -> int:
        return len(self._slots)

    def resolve(self, seqs: list) -> tuple[list, list[str]]:
        """Split step entries (with ``seq_id``, ``prefix_len``, ``new_tokens``) into those
        this worker can serve and the ids it must report lost (unknown sequence, prefix
        mismatch, or no free slot / no room)."""
        ok, lost, seen = [], [], set()
        for s in seqs:
            if s.seq_id in seen or not self._valid_tokens(s.new_tokens):
                lost.append(s.seq_id)  # a repeated id or out-of-vocabulary tokens: never served
                continue
            seen.add(s.seq_id)
            slot = self._slots.get(s.seq_id)
            if slot is not None and self.cache.lengths[slot] != s.prefix_len:
                if s.prefix_len < self.cache.lengths[slot]:
                    self.cache.truncate(slot, s.prefix_len)
                else:
                    self.free([s.seq_id])
                    slot = None
            if slot is None and s.prefix_len == 0:
                try:
                    slot = self._slots[s.seq_id] = self.cache.allocate()
                except CacheFullError:
                    slot = None
            if slot is None or self.cache.lengths[slot] + len(s.new_tokens) > self.cache.max_len - 1:
                lost.append(s.seq_id)
            else:
                ok.append(s)
        return ok, lost

    def _valid_tokens(self, tokens: list[int]) -> bool:
        return all(0 <= t < self.vocab_size for t in tokens)

    def seq_ids(self) -> list[str]:
        """Every sequence holding a slot here."""
        return list(self._slots)

    def free(self, seq_ids: list[str]) -> None:
        """Release slots (unknown ids are ignored)."""
        for sid in seq_ids:
            slot = self._slots.pop(sid, None)
            if slot is not None:
                self.cache.free(slot)
