"""Prefix cache pool: exact copy-in of stored blocks, longest-prefix match, LRU eviction."""

import pytest
import torch

from common.modeling.kv_cache import KVCache
from common.modeling.prefix_cache import PrefixCache

B = 4  # tokens per block


def _cache(slots=3, max_len=32):
    return KVCache(layers=2, slots=slots, max_len=max_len, kv_heads=1, head_dim=2, dtype=torch.float32)


def _committed(cache, tokens):
    """A slot whose row i holds K = token id (V = -K) in every layer, committed."""
    slot = cache.allocate()
    k = torch.tensor(tokens, dtype=torch.float32)[:, None, None].expand(-1, 1, 2)
    for layer in range(2):
        cache.write(layer, slot, 0, k, -k)
    cache.lengths[slot] = len(tokens)
    return slot


class TestLoad:
    def test_copies_stored_rows(self):
        """A prompt sharing 9 tokens with a stored 13-token sequence (3 full blocks + a 1-token
        tail) gets 2 full blocks plus the first row of the third copied in, equal to the stored
        rows in every layer, and its length set to 9."""
        c = _cache()
        pc = PrefixCache(c, blocks=8, block_size=B)
        src = list(range(100, 113))
        pc.store(c, _committed(c, src), src)
        assert pc.blocks_used == 4
        dst = c.allocate()
        n = pc.load(c, dst, src[:9] + [7, 7, 7])
        assert n == 9 and c.lengths[dst] == 9
        for layer in range(2):
            assert c.k[layer, dst, :9, 0, 0].tolist() == src[:9]
            assert c.v[layer, dst, :9, 0, 0].tolist() == [-t for t in src[:9]]
        assert (pc.queries, pc.hits) == (12, 9)

    def test_keeps_last_token_to_compute(self):
        """A prompt equal to a cached 8-token prefix reuses 7 tokens: its last token must be
        prefilled (its hidden state starts decoding)."""
        c = _cache()
        pc = PrefixCache(c, blocks=8, block_size=B)
        src = list(range(100, 112))
        pc.store(c, _committed(c, src), src)
        assert pc.load(c, c.allocate(), src[:8]) == 7
        assert pc.load(c, c.allocate(), src[:9]) == 8

    def test_divergent_first_block_reuses_its_shared_tokens(self):
        """A prompt leaving the first cached block after 3 tokens reuses exactly those 3 rows;
        one differing in its first token reuses nothing and its slot stays empty."""
        c = _cache()
        pc = PrefixCache(c, blocks=8, block_size=B)
        src = list(range(100, 112))
        pc.store(c, _committed(c, src), src)
        dst = c.allocate()
        assert pc.load(c, dst, [100, 101, 102, 0] + src[4:]) == 3
        assert c.k[0, dst, :3, 0, 0].tolist() == [100, 101, 102]
        other = c.allocate()
        assert pc.load(c, other, [1] + src[1:]) == 0
        assert c.lengths[other] == 0

    def test_slot_must_be_empty(self):
        """Loading into a slot that already holds rows is refused."""
        c = _cache()
        pc = PrefixCache(c, blocks=8, block_size=B)
        with pytest.raises(ValueError):
            pc.load(c, _committed(c, [1, 2]), [1, 2, 3])


class TestPartialTail:
    def test_tail_of_finished_sequence_is_reused(self):
        """The rows of a stored sequence's last partial block (a chat answer's end) are reused by
        a next turn that continues it: 2 full blocks + 3 tail rows."""
        c = _cache()
        pc = PrefixCache(c, blocks=8, block_size=B)
        turn1 = list(range(100, 111))  # 2 blocks + 3-token tail
        pc.store(c, _committed(c, turn1), turn1)
        dst = c.allocate()
        assert pc.load(c, dst, turn1 + [5, 6, 7]) == 11
        assert c.k[1, dst, :11, 0, 0].tolist() == turn1

    def test_longer_tail_replaces_its_prefix(self):
        """Storing a longer tail under the same blocks drops the shorter tail it extends (one
        block, not two), and a tail already covered by a cached block is not stored again."""
        c = _cache()
        pc = PrefixCache(c, blocks=8, block_size=B)
        seq = list(range(100, 107))  # 1 block + 3-token tail
        slot = _committed(c, seq)
        assert pc.store(c, slot, seq[:5]) == 2  # block + 1-token tail
        assert pc.store(c, slot, seq) == 1  # the 3-token tail replaces the 1-token one
        assert pc.blocks_used == 2
        assert pc.store(c, slot, seq[:6]) == 0  # covered by the 3-token tail

    def test_reuse_never_aliases_the_pool(self):
        """Rows a sequence writes after its reused prefix (a tree, a commit) leave the pool
        block it copied from unchanged: copy on reuse."""
        c = _cache()
        pc = PrefixCache(c, blocks=8, block_size=B)
        src = list(range(100, 106))
        pc.store(c, _committed(c, src), src)
        dst = c.allocate()
        assert pc.load(c, dst, src[:5] + [9, 9]) == 5
        c.k[:, dst, 5:8] = -1.0  # the new sequence writes over the rest of the block
        again = c.allocate()
        assert pc.load(c, again, src + [1]) == 6
        assert c.k[0, again, :6, 0, 0].tolist() == src


class TestEviction:
    def test_lru_evicts_tails_first(self):
        """With a 4-block pool, storing a new 2-block chain evicts the least recently used chain's
        tail before its head: the older chain keeps a 1-block prefix."""
        c = _cache()
        pc = PrefixCache(c, blocks=4, block_size=B)
        a, b = list(range(100, 108)), list(range(200, 208))
        pc.store(c, _committed(c, a), a)
        pc.store(c, _committed(c, b), b)  # pool full: a0 a1 b0 b1
        pc.load(c, c.allocate(), b + [1])  # b most recent
        c2 = _cache(slots=1)
        new = list(range(300, 304))
        assert pc.store(c2, _committed(c2, new), new) == 1  # evicts a1 (a's tail)
        assert pc.match(a + [1], 9) and len(pc.match(a + [1], 9)) == 1
        assert len(pc.match(b + [1], 9)) == 2

    def test_chain_longer_than_pool(self):
        """A sequence with more full blocks than the pool stores only its first blocks, never
        evicting its own chain."""
        c = _cache()
        pc = PrefixCache(c, blocks=2, block_size=B)
        src = list(range(100, 116))
        assert pc.store(c, _committed(c, src), src) == 2
        assert len(pc.match(src, 16)) == 2

    def test_store_needs_committed_rows(self):
        """Storing more tokens than the slot holds is refused."""
        c = _cache()
        pc = PrefixCache(c, blocks=2, block_size=B)
        with pytest.raises(ValueError):
            pc.store(c, _committed(c, [1, 2]), [1, 2, 3, 4])

    def test_clear(self):
        """clear() empties the pool; every block is free again."""
        c = _cache()
        pc = PrefixCache(c, blocks=2, block_size=B)
        src = list(range(8))
        pc.store(c, _committed(c, src), src)
        pc.clear()
        assert pc.blocks_used == 0 and pc.match(src, 8) == []
