"""A/B, in one process, of the ``tree_size = auto`` policy against fixed tree shapes.

One engine per arm (``auto``, or ``SIZExDEPTH`` for a fixed tree of SIZE nodes and at most DEPTH
levels, or ``plain``), all on the same loaded model pair and the same start-up cost curves; every
prompt runs on every arm at batch 1, the arms' order reversed on every other prompt so that a slow
phase of the host hits all of them. Greedy; prints the running tokens/s per arm after each prompt
and, at the end, each arm's tokens/s (end to end, time to first token included) and tokens per
sequence-round; writes them as JSON with the CPU model. The auto arm's policy keeps learning across prompts,
as a deployment's does.

    .venv/bin/python scripts/ab_tree_shapes.py humaneval 20 auto,8x8,12x10,16x12 --json out.json

An arm named twice runs two engines of that kind (the second reported as ``auto#2``): ``auto,8x8,auto``
shows how far two identical policies drift apart, the A/B's noise floor.

About 1.5 minutes per arm per 20 HumanEval prompts on a 2-core host. ``--batch N`` runs the prompts N
at a time through one engine per arm (continuous batching, as N streams of the service would), each
group on every arm in alternating order; with ``--ignore-eos`` every request generates
``--max-new-tokens``, the HTTP bench's workload:

    .venv/bin/python scripts/ab_tree_shapes.py humaneval 16 plain,auto,2x2 --batch 8 --ignore-eos --json out.json

An arm name ending in ``:sdpa`` runs its engine with the main model's attention on SDPA in every pass (as
before ``build._verify_pass_attention``), the A/B of that choice (every arm shares the warm-up and the cost
curves measured at start with the main model as built):

    .venv/bin/python scripts/ab_tree_shapes.py humaneval 16 plain,plain:sdpa,auto,auto:sdpa --batch 8 --ignore-eos --json out.json

An arm name ending in ``:fixed`` runs with both models' attention routed by the limits they are built with
(``exact_batch_limits``: ``build.DRAFT_EXACT_MAX_COLS`` for the draft, ``build.MAIN_EXACT_MAX_ROWS`` at any
context for the main) instead of the limits ``attention_probe`` measured at start, the A/B of that probe; it shows on long
contexts (``--max-new-tokens 1280 --ignore-eos``):

    .venv/bin/python scripts/ab_tree_shapes.py spec_bench 4 16x8,16x8:fixed --max-new-tokens 1280 --ignore-eos --json out.json
"""

from __future__ import annotations

import argparse
import json

from common.config import load_config
from treespec.bench_data import load_prompts
from common.host import cpu_model
from treespec.bench_run import run_concurrent, run_one
from treespec.bench_suite import Suite


def parse_arm(text: str) -> tuple[int, int] | None:
    """``auto`` -> None (the policy), ``plain`` -> (0, 0), ``8x8`` -> (8, 8); a ``#N`` number
    (``unique_names``) and a ``:sdpa`` or ``:fixed`` suffix are ignored here (``main``). Raises ValueError."""
    text = text.split("#")[0].removesuffix(":sdpa").removesuffix(":fixed")
    if text == "auto":
        return None
    if text == "plain":
        return 0, 0
    size, depth = (int(x) for x in text.split("x"))
    return size, depth


def unique_names(names: list[str]) -> list[str]:
    """The arms' names, a repeated one numbered from its second use (``auto,auto`` -> ``auto``,
    ``auto#2``: two engines of one kind, the A/B's noise floor), so no arm's totals overwrite another's."""
    out: list[str] = []
    for n in names:
        out.append(n if n not in names[:len(out)] else f"{n}#{names[:len(out)].count(n) + 1}")
    return out


def run_group(engine, group: list[list[int]], max_new: int, ignore_eos: bool) -> tuple[int, float, int]:
    """(tokens generated, seconds, sequence-rounds: a round of B sequences counts B, the prefill
    round included) of a group of prompts run at once (continuous batching; a group of one is a
    single request)."""
    before = len(engine.stats.committed)
    r = run_concurrent(engine, group, max_new, ignore_eos)
    return r["tokens"], r["seconds"], len(engine.stats.committed) - before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("limit", type=int)
    ap.add_argument("arms", help="comma list of auto, plain or SIZExDEPTH, each optionally with :sdpa or :fixed")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1, help="prompts run at once per engine (default 1)")
    ap.add_argument("--ignore-eos", action="store_true", help="every request generates --max-new-tokens")
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    if args.batch < 1:
        ap.error(f"--batch must be >= 1, got {args.batch}")
    names = unique_names(args.arms.split(","))
    suite = Suite(load_config(None, {}), load_prompts(args.dataset, args.limit), args.max_new_tokens, 1)
    engines = [suite.engine(parse_arm(n), slots=args.batch) for n in names]
    exact_lib = suite.main.exact_lib  # the main's attention kernel as built; None for ":sdpa" arms
    limits = {m: {False: m.exact_limits, True: m.exact_batch_limits}  # measured, and as built (":fixed" arms)
              for m in (suite.main, suite.draft) if m.attention_plan is not None}  # (a w4a8 main is not probed)
    for e in engines:  # warm-up: first-call allocations stay out of the timings
        run_one(e, "warm", suite.ids[0], 16, False)
    totals = [{"tokens": 0, "seconds": 0.0, "rounds": 0} for _ in names]
    groups = [suite.ids[i:i + args.batch] for i in range(0, len(suite.ids), args.batch)]
    for i, group in enumerate(groups):
        order = range(len(names)) if i % 2 == 0 else reversed(range(len(names)))
        for k in order:
            kind = names[k].split("#")[0]
            suite.main.exact_lib = None if kind.endswith(":sdpa") else exact_lib
            for model, choice in limits.items():
                model.exact_limits = choice[kind.endswith(":fixed")]
            tokens, seconds, rounds = run_group(engines[k], group, args.max_new_tokens, args.ignore_eos)
            totals[k]["tokens"] += tokens
            totals[k]["seconds"] += seconds
            totals[k]["rounds"] += rounds
        print(i, " ".join(f"{n}: {t['tokens'] / t['seconds']:.2f}" for n, t in zip(names, totals)), flush=True)
    arms = {n: {**t, "tokens_per_s": t["tokens"] / t["seconds"], "tokens_per_round": t["tokens"] / t["rounds"]}
            for n, t in zip(names, totals)}
    for n, a in arms.items():
        print(f"{n}: {a['tokens_per_s']:.2f} tok/s, {a['tokens_per_round']:.2f} tokens per sequence-round")
    with open(args.json, "w") as f:
        json.dump({"cpu": cpu_model(), "dataset": args.dataset, "prompts": len(suite.ids), "batch": args.batch,
                   "ignore_eos": args.ignore_eos, "max_new_tokens": args.max_new_tokens, "arms": arms}, f, indent=2)


if __name__ == "__main__":
    main()
