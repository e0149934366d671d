"""Issue-3 demonstration on the real Qwen pair (run while `treespec up` serves).

1. One greedy request through the scheduler API (ZeroMQ) == in-process `treespec generate`
   output, token for token.
2. Aggregate tokens/s with 1 request vs 4 concurrent requests.

Usage: .venv/bin/python scripts/demo_real_services.py [--address tcp://127.0.0.1:5710]
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import wire  # noqa: E402
from common.tokenizer import load_tokenizer  # noqa: E402
from common.control_keys import default_keys_dir
from services.scheduler.client import SchedulerClient  # noqa: E402

MAX_NEW = 64


def prompts(n: int) -> list[str]:
    path = ROOT / "benchmarks" / "data" / "humaneval" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        return [json.loads(line)["prompt"] for line in f][:n]


def run_batch(client: SchedulerClient, ids: list[list[int]], tag: str) -> tuple[list[list[int]], float]:
    """Submit all at once, collect every request's tokens; returns (outputs, seconds)."""
    params = wire.SamplingParams(max_tokens=MAX_NEW)
    t0 = time.perf_counter()
    for i, p in enumerate(ids):
        client.submit(f"{tag}{i}", p, params)
    outs = {f"{tag}{i}": [] for i in range(len(ids))}
    done = set()
    while len(done) < len(ids):
        msg = client.poll(120)
        if msg is None:
            raise TimeoutError("no reply from the scheduler in 120 s")
        if isinstance(msg, wire.TokenDelta) and msg.request_id in outs:
            outs[msg.request_id] += msg.tokens
            if msg.finish is not None:
                done.add(msg.request_id)
        elif isinstance(msg, wire.Rejected):
            raise RuntimeError(f"rejected: {msg.reason}")
    return [outs[f"{tag}{i}"] for i in range(len(ids))], time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", default="tcp://127.0.0.1:5710")
    args = ap.parse_args()
    tok = load_tokenizer("qwen2.5-coder-1.5b")
    ids = [tok.encode(p) for p in prompts(4)]
    client = SchedulerClient(args.address, str(default_keys_dir()), name="demo")
    client.wait_ready(300)
    (single,), t1 = run_batch(client, ids[:1], "one")
    four, t4 = run_batch(client, ids, "four")
    client.close()
    from common.config import load_config
    from treespec.engine import build_local_engine
    engine, _ = build_local_engine(load_config(None, {}), slots=1)
    local = [t for d in engine.generate("local", ids[0], wire.SamplingParams(max_tokens=MAX_NEW)) for t in d.tokens]
    print(json.dumps({
        "service_equals_in_process": single == local, "tokens": len(single),
        "text": tok.decode(single)[:200],
        "one_request_tokens_per_s": len(single) / t1,
        "four_concurrent_aggregate_tokens_per_s": sum(map(len, four)) / t4,
        "four_concurrent_first_equals_single": four[0] == single}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
