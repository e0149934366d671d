"""KV budget: the prefix-cache pool takes what the slots leave, capped at the slots' size."""

from common.config import load_config
from common.modeling.budget import plan_prefix_blocks, plan_slots
from common.modeling.kv_cache import KVCache


def _per_token(model):
    s = model.spec
    return KVCache.bytes_per_token(s.num_layers, s.num_kv_heads, s.head_dim, model.dtype)


class TestPlanPrefixBlocks:
    def test_leftover_budget(self, tiny_main):
        """With room for 2.5 slots of 100 rows and max_running 2, the pool gets the other half
        slot: 50 rows = 3 blocks of 16."""
        cfg = load_config(overrides={"kv_memory_bytes": 250 * _per_token(tiny_main), "max_running": 2,
                                     "max_model_len": 100}, environ={})
        slots, max_len = plan_slots(cfg, tiny_main, 0)
        assert (slots, max_len) == (2, 100)
        assert plan_prefix_blocks(cfg, tiny_main, slots, max_len) == 3

    def test_capped_and_off(self, tiny_main):
        """A huge budget caps the pool at the slots' rows (200 = 12 blocks); prefix_cache = false gives 0."""
        over = {"kv_memory_bytes": 10**6 * _per_token(tiny_main), "max_running": 2, "max_model_len": 100}
        cfg = load_config(overrides=over, environ={})
        assert plan_prefix_blocks(cfg, tiny_main, 2, 100) == 12
        off = load_config(overrides=dict(over, prefix_cache=False), environ={})
        assert plan_prefix_blocks(off, tiny_main, 2, 100) == 0
