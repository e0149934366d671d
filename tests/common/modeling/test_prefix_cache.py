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
        """A prompt sharing 9 tokens with a stored sequence gets its first 2 blocks (8 rows) copied
        in, equal to the stored rows in every layer, and its length set to 8."""
        c = _cache()
        pc = PrefixCache(c, blocks=8, block_size=B)
        src = list(range(100, 113))
        pc.store(c, _committed(c, src), src)
        assert pc.blocks_used == 3
        dst = c.allocate()
        n = pc.load(c, dst, src[:9] + [7, 7, 7])
        assert n == 8 and c.lengths[dst] == 8
        for layer in range(2):
            assert c.k[layer, dst, :8, 0, 0].tolist() == src[:8]
            assert c.v[layer, dst, :8, 0, 0].tolist() == [-t for t in src[:8]]
        assert (pc.queries, pc.hits) == (12, 8)

    def test_keeps_last_token_to_compute(self):
        """A prompt equal to a cached block boundary (8 tokens) reuses only 4: its last token must
        be prefilled (its hidden state starts decoding)."""
        c = _cache()
        pc = PrefixCache(c, blocks=8, block_size=B)
        src = list(range(100, 112))
        pc.store(c, _committed(c, src), src)
        assert pc.load(c, c.allocate(), src[:8]) == 4
        assert pc.load(c, c.allocate(), src[:9]) == 8

    def test_miss_and_divergent_first_block(self):
        """Nothing is reused when the first block differs; the slot stays empty."""
        c = _cache()
        pc = PrefixCache(c, blocks=8, block_size=B)
        src = list(range(100, 112))
        pc.store(c, _committed(c, src), src)
        dst = c.allocate()
        assert pc.load(c, dst, [100, 101, 102, 0] + src[4:]) == 0
        assert c.lengths[dst] == 0

    def test_slot_must_be_empty(self):
        """Loading into a slot that already holds rows is refused."""
        c = _cache()
        pc = PrefixCache(c, blocks=8, block_size=B)
        with pytest.raises(ValueError):
            pc.load(c, _committed(c, [1, 2]), [1, 2, 3])


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
