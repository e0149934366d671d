"""Prefix caching on the real pair: time to first token with the cache on vs off, side by side.

One process loads the model pair once and builds two in-process engines over it (same tree
shape, one request at a time): ``on`` with the draft and verifier prefix caches, ``off``
without. Requests alternate on/off so machine noise hits both alike. Three scenarios:

* ``multi_turn``: Spec-Bench MT-Bench questions (ids 81-160 have two turns). Turn 1 runs on
  ``on`` (filling its cache); turn 2 = [user turn 1, assistant answer 1, user turn 2] through the
  chat template, run on both. Target: turn-2 TTFT on <= 30% of off, identical outputs.
* ``shared_system``: one ~1,500-token system prompt (Spec-Bench RAG/summarization text) with 8
  different short questions. Target: aggregate TTFT >= 3x lower with the cache.
* ``no_share``: prompts from different Spec-Bench categories (they share only the chat
  template's first tokens). Target: no slowdown within noise.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/prefix_cache.py --pairs 6 --max-new-tokens 64 \
        --short-new-tokens 24 --json benchmarks/results/prefix_cache.json
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ROOT / "benchmarks" / "data" / "spec_bench" / "question.jsonl"


def chat_ids(tok, messages: list[dict]) -> list[int]:
    """Token ids of ``messages`` through the chat template, ready for the assistant's turn."""
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tok(text, add_special_tokens=False)["input_ids"]


def measure(engine, rid: str, ids: list[int], max_new: int) -> dict:
    from treespec.bench_run import run_one
    verifier, draft = engine.verifier.table.prefix, engine.draft.table.prefix if engine.draft else None
    before = (verifier.hits if verifier else 0, draft.hits if draft else 0)
    run = run_one(engine, rid, ids, max_new, False)
    after = (verifier.hits if verifier else 0, draft.hits if draft else 0)
    return {"prompt_tokens": len(ids), "ttft_s": run.ttft, "seconds": run.seconds, "tokens": run.tokens,
            "verifier_hit_tokens": after[0] - before[0], "draft_hit_tokens": after[1] - before[1]}


def side_by_side(on, off, rid: str, ids: list[int], max_new: int) -> dict:
    a = measure(on, f"on-{rid}", ids, max_new)
    b = measure(off, f"off-{rid}", ids, max_new)
    first_diff = next((i for i, (x, y) in enumerate(zip(a["tokens"], b["tokens"])) if x != y), None)
    return {"id": rid, "on": a, "off": b, "identical": a["tokens"] == b["tokens"], "first_diff": first_diff}


def multi_turn(on, off, tok, rows: list[dict], max_new: int) -> list[dict]:
    from treespec.bench_run import run_one
    out = []
    for r in rows:
        first = [{"role": "user", "content": r["turns"][0]}]
        answer = run_one(on, f"t1-{r['question_id']}", chat_ids(tok, first), max_new, False).tokens
        text = tok.decode(answer, skip_special_tokens=True)
        second = first + [{"role": "assistant", "content": text}, {"role": "user", "content": r["turns"][1]}]
        out.append(side_by_side(on, off, f"mt{r['question_id']}", chat_ids(tok, second), max_new))
    return out


def system_prompt(tok, rows: list[dict], tokens: int) -> str:
    """About ``tokens`` tokens of Spec-Bench RAG / summarization text as reference documents."""
    docs = "\n\n".join(r["turns"][0] for r in rows if r["category"] in ("rag", "summarization"))
    ids = tok(docs, add_special_tokens=False)["input_ids"][:tokens]
    return ("You are a careful assistant. Answer using the reference documents below.\n\n"
            + tok.decode(ids, skip_special_tokens=True))


def shared_system(on, off, tok, rows: list[dict], n: int, tokens: int, max_new: int) -> list[dict]:
    system = system_prompt(tok, rows, tokens)
    questions = [r["turns"][0] for r in rows if r["category"] == "qa"][:n]
    return [side_by_side(on, off, f"sys{i}", chat_ids(tok, [{"role": "system", "content": system},
                                                             {"role": "user", "content": q}]), max_new)
            for i, q in enumerate(questions)]


def no_share(on, off, tok, rows: list[dict], n: int, max_new: int) -> list[dict]:
    cats = ("translation", "math_reasoning", "qa", "summarization", "rag", "writing", "coding", "stem")
    picked = [next(r for r in rows[200:] + rows if r["category"] == c) for c in cats][:n]
    return [side_by_side(on, off, f"ns{r['question_id']}", chat_ids(tok, [{"role": "user", "content": r["turns"][0]}]),
                         max_new) for r in picked]


def summarize(records: list[dict]) -> dict:
    on = sum(r["on"]["ttft_s"] for r in records)
    off = sum(r["off"]["ttft_s"] for r in records)
    return {"requests": len(records), "ttft_on_s": on, "ttft_off_s": off, "ttft_on_over_off": on / off,
            "ttft_speedup": off / on, "identical": sum(r["identical"] for r in records),
            "verifier_hit_tokens": sum(r["on"]["verifier_hit_tokens"] for r in records),
            "prompt_tokens": sum(r["on"]["prompt_tokens"] for r in records)}


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return platform.processor()
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=6, help="MT-Bench two-turn questions")
    ap.add_argument("--questions", type=int, default=8, help="questions after the shared system prompt")
    ap.add_argument("--system-tokens", type=int, default=1500)
    ap.add_argument("--no-share", type=int, default=6, help="unrelated prompts")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="multi-turn answers")
    ap.add_argument("--short-new-tokens", type=int, default=24, help="shared-system and no-share answers")
    ap.add_argument("--tree-size", type=int, default=16)
    ap.add_argument("--scenarios", default="shared_system,multi_turn,no_share")
    ap.add_argument("--dtype", default=None, help="float32 | bfloat16 (default: the config's)")
    ap.add_argument("--config", default=None)
    ap.add_argument("--json", required=True)
    args = ap.parse_args(argv)

    import torch

    from common.config import load_config
    from common.modeling.build import load_pair
    from treespec.engine import make_engine
    from treespec.bench import write_json
    over = {"tree_size": args.tree_size} | ({"dtype": args.dtype} if args.dtype else {})
    cfg = load_config(args.config, over | {"prefix_cache": True})
    off_cfg = load_config(args.config, over | {"prefix_cache": False})
    main_m, draft, tok = load_pair(cfg)
    tree = (args.tree_size, cfg.max_accept_length)
    on, off = (make_engine(c, main_m, draft, tok, 1, tree) for c in (cfg, off_cfg))
    rows = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    two_turn = [r for r in rows if 81 <= r["question_id"] <= 160 and len(r["turns"]) == 2][: args.pairs]
    result = {"config": {"main": cfg.main_model_path, "draft": cfg.draft_model_path, "dtype": cfg.dtype,
                         "tree": list(tree), "max_new_tokens": args.max_new_tokens,
                         "short_new_tokens": args.short_new_tokens,
                         "block_size": cfg.prefix_cache_block_size,
                         "prefix_blocks": {"verifier": on.verifier.table.prefix.blocks_total,
                                           "draft": on.draft.table.prefix.blocks_total},
                         "cpu": cpu_model(), "torch_threads": torch.get_num_threads(),
                         "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}}
    runs = {"multi_turn": lambda: multi_turn(on, off, tok, two_turn, args.max_new_tokens),
            "shared_system": lambda: shared_system(on, off, tok, rows, args.questions, args.system_tokens,
                                                   args.short_new_tokens),
            "no_share": lambda: no_share(on, off, tok, rows, args.no_share, args.short_new_tokens)}
    for name in args.scenarios.split(","):
        on.verifier.table.prefix.clear()
        on.draft.table.prefix.clear()  # each scenario starts cold
        records = runs[name]()
        result[name] = {"summary": summarize(records), "records": records}
        print(name, json.dumps(result[name]["summary"]), file=sys.stderr, flush=True)
        write_json(args.json, result)  # partial results survive an interrupted run
    return 0


if __name__ == "__main__":
    sys.exit(main())
