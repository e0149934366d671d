"""Slot KV cache: allocation, commit of accepted rows, truncation, capacity errors."""

import pytest
import torch

from common.modeling.kv_cache import CacheFullError, KVCache


def _cache(slots=2, max_len=8):
    return KVCache(layers=2, slots=slots, max_len=max_len, kv_heads=1, head_dim=2, dtype=torch.float32)


def _fill(cache, slot, start, values):
    """Write rows whose K (and V = -K) equal ``values`` in every layer."""
    k = torch.tensor(values, dtype=torch.float32)[:, None, None].expand(-1, 1, 2)
    for layer in range(2):
        cache.write(layer, slot, start, k, -k)


class TestCommit:
    def test_copies_accepted_rows_into_prefix(self):
        """Committing rows [2, 4, 6] after a prefix of 2 moves them to rows 2, 3, 4 in every layer."""
        c = _cache()
        s = c.allocate()
        _fill(c, s, 0, [10, 11, 20, 21, 22, 23, 24])
        c.lengths[s] = 2
        c.commit(s, [2, 4, 6])
        assert c.lengths[s] == 5
        for layer in range(2):
            assert c.k[layer, s, :5, 0, 0].tolist() == [10, 11, 20, 22, 24]
            assert c.v[layer, s, :5, 0, 1].tolist() == [-10, -11, -20, -22, -24]

    def test_in_place_rows_and_empty(self):
        """Rows already contiguous are kept as they are; an empty commit changes nothing."""
        c = _cache()
        s = c.allocate()
        _fill(c, s, 0, [1, 2, 3])
        c.commit(s, [0, 1, 2])
        c.commit(s, [])
        assert c.lengths[s] == 3 and c.k[0, s, :3, 0, 0].tolist() == [1, 2, 3]

    def test_other_slot_untouched(self):
        """A commit in one slot leaves another slot's rows alone."""
        c = _cache()
        a, b = c.allocate(), c.allocate()
        _fill(c, a, 0, [1, 2, 3, 4])
        _fill(c, b, 0, [5, 6, 7, 8])
        c.commit(a, [3])
        assert c.k[0, b, :4, 0, 0].tolist() == [5, 6, 7, 8]

    @pytest.mark.parametrize("rows", [[3, 2], [0]])
    def test_rows_must_ascend_from_prefix(self, rows):
        """Unsorted rows or rows inside the committed prefix raise ValueError."""
        c = _cache()
        s = c.allocate()
        c.lengths[s] = 1
        with pytest.raises(ValueError):
            c.commit(s, rows)


class TestWrite:
    def test_rows_past_capacity_dropped(self):
        """Padding rows that would land past max_len are dropped instead of failing."""
        c = _cache(max_len=4)
        s = c.allocate()
        _fill(c, s, 2, [1, 2, 3, 4])
        assert c.k[0, s, :, 0, 0].tolist() == [0, 0, 1, 2]


class TestTruncate:
    def test_rolls_back(self):
        """truncate shortens the prefix; growing it is refused."""
        c = _cache()
        s = c.allocate()
        c.commit(s, [0, 1, 2, 3])
        c.truncate(s, 1)
        assert c.lengths[s] == 1
        with pytest.raises(ValueError):
            c.truncate(s, 2)
        with pytest.raises(ValueError):
            c.truncate(s, -1)


class TestCapacity:
    def test_no_free_slot(self):
        """Allocating past the slot count raises CacheFullError; freeing makes room again."""
        c = _cache(slots=2)
        a = c.allocate()
        c.allocate()
        with pytest.raises(CacheFullError):
            c.allocate()
        c.commit(a, [0, 1])
        c.free(a)
        c.free(a)  # idempotent
        assert c.slots_used == 1
        assert c.allocate() == a and c.lengths[a] == 0

    def test_check_room(self):
        """check_room accepts exactly up to max_len and raises CacheFullError beyond."""
        c = _cache(max_len=8)
        s = c.allocate()
        c.commit(s, [0, 1, 2])
        c.check_room(s, 5)
        with pytest.raises(CacheFullError, match="max_len 8"):
            c.check_room(s, 6)

    def test_bytes_per_token(self):
        """bytes_per_token counts K and V across all layers."""
        assert KVCache.bytes_per_token(2, 1, 2, torch.float32) == 2 * 2 * 1 * 2 * 4
