"""The in-process engine and the service (real processes) run the same round driver: on
the real Qwen pair they produce the same greedy tokens."""

from __future__ import annotations

import gc
import gzip
import json
from pathlib import Path

import pytest

from common import wire
from cluster import start_cluster, wait_workers

HUMANEVAL = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "humaneval" / "HumanEval.jsonl.gz"
REAL = {"main_model_path": "qwen2.5-coder-1.5b", "draft_model_path": "qwen2.5-coder-0.5b", "dtype": "bfloat16",
        "tree_size": "8", "max_accept_length": "4", "max_model_len": "512", "max_running": "2",
        "draft_vocab_size": "0", "heartbeat_interval_s": "1", "heartbeat_timeout_s": "30"}
MAX_TOKENS = 24


def prompts(tok) -> list[list[int]]:
    with gzip.open(HUMANEVAL, "rt") as f:
        return [tok.encode(json.loads(line)["prompt"]) for line, _ in zip(f, range(2))]


@pytest.mark.real
@pytest.mark.timeout(1500)
class TestSameDriverInProcessAndServed:
    def test_greedy_tokens_identical(self, tmp_path):
        """2 HumanEval prompts x 24 greedy tokens: LocalEngine (in-process transport) and
        scheduler + draft + verifier processes (ZeroMQ) commit the same tokens."""
        from common.config import load_config
        from treespec.engine import build_local_engine
        engine, tok = build_local_engine(load_config(overrides=REAL), slots=1)
        ids = prompts(tok)
        params = wire.SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
        local = [[t for d in engine.generate(f"l{i}", p, params) for t in d.tokens] for i, p in enumerate(ids)]
        del engine
        gc.collect()
        cluster = start_cluster(tmp_path, **REAL)  # overrides the tiny BASE config
        try:
            client = cluster.client()
            wait_workers(client, 1, 1, timeout_s=900)
            served = [client.generate(f"s{i}", p, params, timeout_s=600)[0] for i, p in enumerate(ids)]
            client.close()
        finally:
            cluster.stop()
        assert served == local, (tok.decode(local[0]), tok.decode(served[0]))
        assert all(len(o) == MAX_TOKENS for o in local)
