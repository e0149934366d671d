"""Cache-aware placement: approximate per-worker prefix index and the placement choice."""

from common.prefix_hash import block_keys
from services.scheduler.prefix_index import PrefixIndex, choose

SYSTEM = list(range(1000, 1064))  # 4 blocks of 16


class TestPrefixIndex:
    def test_match_leading_run(self):
        """A prompt sharing the 4-block system prompt matches 4 blocks; a different first block 0."""
        idx = PrefixIndex()
        idx.add(block_keys(SYSTEM + [1, 2, 3], 16))
        assert idx.match(block_keys(SYSTEM + list(range(50)), 16)) == 4
        assert idx.match(block_keys([0] + SYSTEM, 16)) == 0

    def test_capacity_drops_tails_first(self):
        """Over capacity, the least recent chain loses its tail blocks before its head."""
        idx = PrefixIndex(capacity=4)
        old, new = block_keys(SYSTEM, 16), block_keys(list(range(5000, 5032)), 16)
        idx.add(old)
        idx.add(new)
        assert len(idx) == 4 and idx.match(old) == 2 and idx.match(new) == 2

    def test_resize(self):
        """Shrinking to the worker's reported pool size evicts at once."""
        idx = PrefixIndex()
        idx.add(block_keys(SYSTEM, 16))
        idx.resize(1)
        assert len(idx) == 1 and idx.match(block_keys(SYSTEM, 16)) == 1


class TestChoose:
    def test_prefers_longest_match_when_balanced(self):
        """Within the load slack the worker holding the prefix wins even if slightly busier."""
        load, match = {"a": 0, "b": 1}, {"a": 0, "b": 3}
        assert choose(["a", "b"], load.get, match.get, slack=1) == "b"

    def test_load_beats_cache_beyond_slack(self):
        """A worker holding the prefix but more than ``slack`` busier than the least loaded is skipped."""
        load, match = {"a": 0, "b": 3}, {"a": 0, "b": 3}
        assert choose(["a", "b"], load.get, match.get, slack=1) == "a"

    def test_no_match_least_loaded(self):
        """With no match anywhere the least loaded worker is chosen; no candidates gives None."""
        load, match = {"a": 2, "b": 1}, {"a": 0, "b": 0}
        assert choose(["a", "b"], load.get, match.get, slack=4) == "b"
        assert choose([], load.get, match.get, slack=1) is None
