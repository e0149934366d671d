"""Which worker holds each sequence's KV: placing a sequence, freeing it, and the block keys
cache-aware placement remembers for each worker (``prefix_index.py``). Pure and torch-free.

A sequence is placed once per role (draft, verifier) and stays until it finishes or its
worker loses it; ``Placement`` (``core.py``) tracks how many of its tokens the worker holds.
The draft worker holds the sequence's draft view (``Sequence.draft_view``: a long prompt's
middle skipped), so its block keys are those of the view, not of the whole sequence.
"""

from __future__ import annotations

from common import wire
from common.config import Config
from common.prefix_hash import block_keys
from services.scheduler.core import Sequence
from services.scheduler.workers import Worker, WorkerRegistry

Out = tuple[bytes, wire.Message]  # (peer identity, message to send it)


class Placer:
    """Places sequences on ``workers`` and frees them there; ``cfg``: prefix-cache settings."""

    def __init__(self, workers: WorkerRegistry, cfg: Config) -> None:
        self.workers, self.cfg = workers, cfg

    def place(self, seq: Sequence, role: wire.Role) -> Worker | None:
        """``seq``'s ``role`` worker: the one it is placed on, else a newly picked one (the
        longest cached prefix among the least loaded), None when no worker has a free slot."""
        placement = seq.placement(role)
        w = self.workers.get(placement.worker)
        if w is None:
            keys = self.keys(self.seen(seq, role, len(seq.tokens)))
            w = self.workers.pick(role, keys)
            if w is None:
                return None
            placement.place(w.key)
            w.seqs.add(seq.request_id)
            w.prefix.add(keys)
        return w

    def unplace(self, seq: Sequence, role: wire.Role) -> list[Out]:
        """Forget ``seq``'s KV on its ``role`` worker; the Free message for that worker (none
        when it is gone). The worker retains the blocks it held: they are remembered."""
        placement = seq.placement(role)
        w = self.workers.get(placement.worker)
        held = min(placement.held, len(seq.tokens))
        placement.lost()
        if w is None:
            return []
        w.seqs.discard(seq.request_id)
        w.prefix.add(self.keys(self.seen(seq, role, held)))
        return [(w.identity, wire.Free(seq_ids=[seq.request_id]))]

    def keys(self, tokens: list[int]) -> list[int]:
        """Prefix-cache block keys of ``tokens`` (none when the cache is off)."""
        return block_keys(tokens, self.cfg.prefix_cache_block_size) if self.cfg.prefix_cache else []

    @staticmethod
    def seen(seq: Sequence, role: wire.Role, upto: int) -> list[int]:
        """The tokens a ``role`` worker holds for the sequence's first ``upto`` (the draft's view
        skips ``seq.draft_hidden``)."""
        return seq.draft_view(0, upto)[1] if role == wire.Role.DRAFT else seq.tokens[:upto]
