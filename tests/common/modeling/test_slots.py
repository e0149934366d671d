"""Prefix reuse through the slot table: outputs identical with the prefix cache on and off.

Greedy fp32 speculative decoding on tiny random models (the noisy draft, so trees are
partially accepted and the verifier commits tree rows): every case runs the same requests
on an engine without a prefix cache and on one with it, and pins that the cached run
really reused KV (so the comparison could fail).
"""

import numpy as np
import pytest

from common import wire
from common.config import Config
from services.draft.runner import DraftRunner
from services.scheduler.core import SchedulerCore
from services.scheduler.local import LocalEngine
from services.verifier.runner import VerifierRunner

B = 8  # prefix-cache block size
MAX_LEN = 256
RNG = np.random.default_rng(7)
SYSTEM = [int(x) for x in RNG.integers(0, 150000, 43)]  # shared prefix: 5 full blocks + 3 tokens
PARAMS = wire.SamplingParams(max_tokens=8, ignore_eos=True)


def _engine(main, draft, blocks: int, slots: int = 4):
    core = SchedulerCore(slots, 64, 200, {151645})
    cfg = Config(tree_size=8, max_accept_length=4, overlap="off", max_model_len=200, prefix_cache=blocks > 0,
                 prefix_cache_block_size=B)
    return LocalEngine(cfg, core, VerifierRunner(main, slots, MAX_LEN, prefix_blocks=blocks, block_size=B),
                       DraftRunner(draft, slots, MAX_LEN, prefix_blocks=blocks, block_size=B))


def _sequential(engine, prompts: list[list[int]]) -> list[list[int]]:
    return [engine.timed_generate(f"r{i}", p, PARAMS)[0] for i, p in enumerate(prompts)]


def _hits(engine) -> tuple[int, int]:
    return engine.verifier.table.prefix.hits, engine.draft.table.prefix.hits


@pytest.fixture
def pair(tiny_main, tiny_noisy_draft):
    """(cache-off engine, cache-on engine with a 64-block pool)."""
    return _engine(tiny_main, tiny_noisy_draft, 0), _engine(tiny_main, tiny_noisy_draft, 64)


class TestPrefixReuseIdentical:
    @pytest.mark.parametrize("common_len", [43, 40], ids=["mid-block", "block-boundary"])
    def test_shared_prefix(self, pair, common_len):
        """Prompts sharing a prefix that ends mid-block or exactly at a block boundary give the
        same outputs with the cache on as off, and the second reuses every shared token (full
        blocks, then the shared rows of the block it leaves mid-way)."""
        prompts = [SYSTEM[:common_len] + [11, 12, 13], SYSTEM[:common_len] + [500, 600, 700, 800]]
        off, on = pair
        assert _sequential(on, prompts) == _sequential(off, prompts)
        assert _hits(on) == (common_len, common_len)

    def test_prompt_is_prefix_of_cached(self, pair):
        """A prompt that is a prefix of a finished sequence's tokens (its prompt + output) reuses
        all of it but the last token (which is always computed), with identical output."""
        off, on = pair
        first = _sequential(on, [SYSTEM])[0]
        assert first == _sequential(off, [SYSTEM])[0]
        second = (SYSTEM + first)[:50]
        assert on.timed_generate("p", second, PARAMS)[0] == off.timed_generate("p", second, PARAMS)[0]
        assert _hits(on)[0] == 49  # the first run was cold; 49 of the 50 tokens reused

    def test_multi_turn(self, pair):
        """A second turn = first prompt + its answer + a new message reuses every token of the
        first turn that has KV (its answer's tail block included, retained when the first turn
        finished), with identical output."""
        off, on = pair
        turn1 = _sequential(on, [SYSTEM])[0]
        turn2 = SYSTEM + turn1 + [42, 43, 44]
        assert on.timed_generate("t2", turn2, PARAMS)[0] == off.timed_generate("t2", turn2, PARAMS)[0]
        held = len(SYSTEM) + len(turn1) - 1  # the verifier's KV: all but the last bonus token
        assert _hits(on)[0] == held  # the first turn was cold

    def test_concurrent_sharing(self, pair):
        """Four sequences admitted together, then four more sharing their prefix while the first
        ones still run, all match the cache-off outputs."""
        off, on = pair
        prompts = [SYSTEM + [i, i + 1] for i in range(8)]

        def run(engine):
            out = {}
            for i, p in enumerate(prompts):
                engine.submit(f"c{i}", p, PARAMS)
                if i == 3:
                    out.update(_step(engine, out))
            while len([k for k in out if out[k][1]]) < len(prompts):
                out.update(_step(engine, out))
            return {k: v[0] for k, v in out.items()}
        assert run(on) == run(off)
        assert _hits(on)[0] >= 4 * 5 * B


def _step(engine, out):
    got = {k: (list(v[0]), v[1]) for k, v in out.items()}
    for d in engine.step():
        toks, _ = got.get(d.request_id, ([], False))
        got[d.request_id] = (toks + d.tokens, d.finish is not None)
    return got


class TestEvictionAndRestart:
    def test_eviction_under_pressure(self, tiny_main, tiny_noisy_draft):
        """With a 6-block pool and four concurrent sequences of different 40-token prompts
        (more blocks than fit), eviction churns while they run and no output changes."""
        prompts = [[int(x) for x in RNG.integers(0, 150000, 40)] for _ in range(4)]
        prompts += [p[:24] + [9, 9] for p in prompts]  # partial reuse of evicted / kept chains
        off = _engine(tiny_main, tiny_noisy_draft, 0)
        on = _engine(tiny_main, tiny_noisy_draft, 6)
        reqs = {f"e{i}": (p, PARAMS) for i, p in enumerate(prompts)}
        assert _all_at_once(on, reqs) == _all_at_once(off, reqs)
        assert on.verifier.table.prefix.blocks_used == 6

    def test_restart_starts_cold(self, tiny_main, tiny_noisy_draft):
        """A new runner (a restarted worker) holds no blocks: the same prompt is a full miss."""
        first = _engine(tiny_main, tiny_noisy_draft, 64)
        _sequential(first, [SYSTEM])
        again = _engine(tiny_main, tiny_noisy_draft, 64)
        _sequential(again, [SYSTEM])
        assert _hits(again) == (0, 0) and again.verifier.table.prefix.queries == len(SYSTEM)

    def test_failed_step_keeps_nothing(self, tiny_main, tiny_noisy_draft):
        """Freeing with keep=False (a failed step) retains no blocks."""
        eng = _engine(tiny_main, tiny_noisy_draft, 64)
        eng.submit("f", SYSTEM[:20], PARAMS)
        eng.step()
        eng.verifier.table.prefix.clear()
        eng.verifier.free(["f"], keep=False)
        assert eng.verifier.table.prefix.blocks_used == 0


def _all_at_once(engine, reqs):
    for rid, (p, prm) in reqs.items():
        engine.submit(rid, p, prm)
    out, done = {rid: [] for rid in reqs}, set()
    while len(done) < len(reqs):
        for d in engine.step():
            out[d.request_id] += d.tokens
            if d.finish is not None:
                done.add(d.request_id)
    return out
