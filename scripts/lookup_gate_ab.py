"""A/B, in one process, of prompt lookup decided per sequence against one engine-wide decision.

Engine A is the engine as it ships: each request keeps its own ``SeqLookup`` (lookup acceptance,
round rates with and without its lookup nodes, explore schedule), the engine-wide
``LookupStats`` as its prior (``services/scheduler/lookup_policy.py``). Engine B gives every
request one shared ``SeqLookup``: one gate for the whole engine, which is how treespec decided
before 256afe8. Both load the same real model pair once, share the measured cost curves, and run
every prompt at batch 1, alternating which engine goes first, so a slow phase of the host hits
both. Greedy, 128 new tokens; prints per-prompt and aggregate tokens/s (end to end, time to first
token included), MAL, lookup tokens proposed / accepted and the A/B ratio per category, and
writes the per-prompt records as JSON.

    .venv/bin/python scripts/lookup_gate_ab.py spec_bench 24 --json out.json
    .venv/bin/python scripts/lookup_gate_ab.py humaneval 20 --json out.json

About 5 minutes per 20 prompts on a 2-core host.
"""

from __future__ import annotations

import argparse
import json
import platform

from common import wire
from common.config import load_config
from common.modeling.build import load_pair
from services.scheduler.lookup_policy import SeqLookup
from treespec.bench_data import load_prompts
from common.host import cpu_model
from treespec.engine import make_engine, measure_costs
from treespec.generate import encode_prompt


def engine_wide(engine) -> None:
    """Make every request ``engine`` admits share one SeqLookup (the engine-wide gate)."""
    shared, submit = SeqLookup(), engine.driver.core.submit

    def share(msg):
        seq = submit(msg)
        seq.lookup = shared
        return seq

    engine.driver.core.submit = share


def rate(records: list[dict]) -> float:
    """Tokens per second over ``records`` (sum of tokens / sum of seconds)."""
    return sum(r["tokens"] for r in records) / sum(r["seconds"] for r in records)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", help="humaneval | spec_bench[:category]")
    ap.add_argument("limit", type=int)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    cfg = load_config()
    main_model, draft, tok = load_pair(cfg)
    costs = measure_costs(main_model, draft)
    engines = {"per_sequence": make_engine(cfg, main_model, draft, tok, 1, None, costs),
               "engine_wide": make_engine(cfg, main_model, draft, tok, 1, None, costs)}
    engine_wide(engines["engine_wide"])
    records: dict[str, list[dict]] = {name: [] for name in engines}
    for i, p in enumerate(load_prompts(args.dataset, args.limit)):
        ids = encode_prompt(tok, p.text, p.chat)
        for name in (list(engines) if i % 2 == 0 else list(engines)[::-1]):
            params = wire.SamplingParams(max_tokens=args.max_new_tokens)
            out, sec, committed = engines[name].timed_generate(f"{name}-{i}", ids, params)
            records[name].append({"id": p.id, "category": p.category, "tokens": len(out), "seconds": sec,
                                  "rounds": len(committed)})
        print(i, p.category, {n: round(r[-1]["tokens"] / r[-1]["seconds"], 2) for n, r in records.items()}, flush=True)
    summary = {name: {"tokens_per_s": rate(rs), "mal": sum(r["tokens"] for r in rs) / sum(r["rounds"] for r in rs),
                      "lookup_proposed": engines[name].driver.policy.lookup.proposed,
                      "lookup_accepted": engines[name].driver.policy.lookup.accepted} for name, rs in records.items()}
    by_cat = {c: rate([r for r in records["per_sequence"] if r["category"] == c])
              / rate([r for r in records["engine_wide"] if r["category"] == c])
              for c in sorted({r["category"] for r in records["per_sequence"]})}
    print(json.dumps({"summary": summary, "per_sequence_over_engine_wide": by_cat}, indent=2))
    with open(args.json, "w") as f:
        json.dump({"command": f"scripts/lookup_gate_ab.py {args.dataset} {args.limit}", "cpu": cpu_model(),
                   "machine": platform.machine(), "summary": summary, "per_sequence_over_engine_wide": by_cat,
                   "records": records}, f, indent=1)


if __name__ == "__main__":
    main()
