"""Chained block keys: equal exactly on shared full-block prefixes."""

import pytest

from common.prefix_hash import block_keys


class TestBlockKeys:
    def test_shared_prefix_shares_keys(self):
        """Two sequences agreeing on 10 tokens share the key of their first full block of 4, and
        diverge from the block holding the first difference on."""
        a, b = list(range(20)), list(range(10)) + [99] * 10
        ka, kb = block_keys(a, 4), block_keys(b, 4)
        assert len(ka) == len(kb) == 5
        assert ka[:2] == kb[:2] and all(x != y for x, y in zip(ka[2:], kb[2:]))

    def test_only_full_blocks_and_limit(self):
        """A partial tail block gets no key; ``limit`` cuts the tokens first."""
        assert len(block_keys(list(range(11)), 4)) == 2
        assert len(block_keys(list(range(11)), 4, limit=7)) == 1

    def test_key_names_the_whole_prefix(self):
        """Equal block contents after different prefixes get different keys (chaining)."""
        assert block_keys([1, 2, 5, 6], 2)[1] != block_keys([3, 4, 5, 6], 2)[1]

    def test_bad_block_size(self):
        """A block size below 1 is refused."""
        with pytest.raises(ValueError):
            block_keys([1], 0)
