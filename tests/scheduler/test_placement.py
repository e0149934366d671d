"""Placer: a sequence is placed once per role, freed with a Free message, and its worker is
remembered as holding the blocks of what it held (the draft's view for the draft)."""

from common import wire
from common.config import Config
from common.prefix_hash import block_keys
from services.scheduler.core import SchedulerCore
from services.scheduler.placement import Placer
from services.scheduler.workers import WorkerRegistry

DRAFT, VERIFIER = b"draft-0", b"verifier-0"
BLOCK = 16


def _setup():
    reg = WorkerRegistry(1e9)
    reg.hello(DRAFT, wire.Hello(role=wire.Role.DRAFT, replica="0", pid=1, slots_total=2, max_len=512), 0.0)
    reg.hello(VERIFIER, wire.Hello(role=wire.Role.VERIFIER, replica="0", pid=2, slots_total=2, max_len=512), 0.0)
    core = SchedulerCore(2, 4, 512, {0})
    seq = core.submit(wire.Submit(request_id="r", prompt=list(range(1, 201)), params=wire.SamplingParams(max_tokens=8)))
    return reg, Placer(reg, Config(prefix_cache_block_size=BLOCK)), seq


class TestPlacer:
    def test_place_is_sticky_and_unplace_frees_the_slot(self):
        """A placed sequence keeps its worker on the next call; unplacing sends that worker a
        Free for it, empties its slot and resets the placement."""
        reg, placer, seq = _setup()
        w = placer.place(seq, wire.Role.VERIFIER)
        assert w.identity == VERIFIER and placer.place(seq, wire.Role.VERIFIER) is w and "r" in w.seqs
        (ident, free), = placer.unplace(seq, wire.Role.VERIFIER)
        assert ident == VERIFIER and free.seq_ids == ["r"] and not w.seqs and seq.verifier.worker is None
        assert placer.unplace(seq, wire.Role.VERIFIER) == []  # nothing placed any more

    def test_a_windowed_draft_is_remembered_by_the_blocks_of_its_view(self):
        """After freeing a draft that held a windowed view (prompt[:16] + prompt[180:]), the draft
        worker's index matches the view's blocks and only the shared first block of the sequence."""
        reg, placer, seq = _setup()
        seq.draft_hidden = (16, 180)
        placer.place(seq, wire.Role.DRAFT)
        seq.draft.sent(len(seq.tokens))
        placer.unplace(seq, wire.Role.DRAFT)
        index = reg.get(DRAFT.hex()).prefix
        view = seq.prompt[:16] + seq.prompt[180:]
        assert index.match(block_keys(view, BLOCK)) == len(view) // BLOCK
        assert index.match(block_keys(seq.prompt, BLOCK)) == 1
