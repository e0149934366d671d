"""The draft's context window on long prompts: speculation with the draft seeing the whole
prompt vs only its first 32 + last W tokens (``draft_context_window``), side by side.

One process loads the model pair once and builds in-process engines over it (one request at
a time, ``tree_size`` auto): ``plain`` (no speculation), ``full`` (window 0: the draft sees
every prompt token) and one per window in ``--windows``. Each prompt runs on every engine,
the order rotating from prompt to prompt so machine noise hits all alike. The prompts are
Spec-Bench's long-prompt categories (RAG ~750 tokens, summarization ~700), taken
``--stride`` apart so they are not only the first few a benchmark usually samples.
Reports end-to-end tokens/s (time to first token included) per engine and category and
whether every speculative output equals plain greedy decoding. ``--shared-system N``
instead sends N requests, in order, that share one ~750-token system prompt: the case
where a draft that skipped the prompt's middle could not reuse its prefix cache.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/draft_window.py --per-category 6 \
        --windows 128,256,512 --max-new-tokens 128 --json benchmarks/results/draft_window.json
    PYTHONPATH=$PWD .venv/bin/python benchmarks/draft_window.py --shared-system 8 --windows 256 \
        --max-new-tokens 64 --json benchmarks/results/draft_window_shared.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import replace
from pathlib import Path


def pick_prompts(categories: list[str], per_category: int, stride: int, offset: int):
    """``per_category`` Spec-Bench prompts of each category: every ``stride``-th one from
    the ``offset``-th."""
    from treespec.bench_data import load_prompts
    rows = load_prompts("spec_bench", 10_000)
    return [p for c in categories for p in [q for q in rows if q.category == c][offset::stride][:per_category]]


def shared_system_prompts(tok, n: int) -> list[tuple[str, str, list[int]]]:
    """(id, category, token ids) of ``n`` chat requests sharing one long system prompt (the
    first Spec-Bench RAG prompt, ~750 tokens) with different short questions (Spec-Bench QA)."""
    from treespec.bench_data import load_prompts
    rows = load_prompts("spec_bench", 10_000)
    system = next(p.text for p in rows if p.category == "rag")
    out = []
    for q in [p for p in rows if p.category == "qa"][:n]:
        text = tok.apply_chat_template([{"role": "system", "content": system}, {"role": "user", "content": q.text}],
                                       tokenize=False, add_generation_prompt=True)
        out.append((q.id, "shared_system", tok(text, add_special_tokens=False)["input_ids"]))
    return out


def summarise(records: list[dict], names: list[str]) -> dict:
    """Tokens/s per engine (all prompts and per category) and the ratio to plain."""
    def rate(rows, name):
        return sum(len(r[name]["tokens"]) for r in rows) / sum(r[name]["seconds"] for r in rows)
    groups = {"all": records} | {c: [r for r in records if r["category"] == c]
                                 for c in sorted({r["category"] for r in records})}
    out = {}
    for g, rows in groups.items():
        tps = {n: rate(rows, n) for n in names}
        out[g] = {n: {"tokens_per_s": round(tps[n], 3), "vs_plain": round(tps[n] / tps["plain"], 3),
                      "ttft_s_mean": round(sum(r[n]["ttft_s"] for r in rows) / len(rows), 3)} for n in names}
    return out


def result_doc(script: str, args: argparse.Namespace, records: list[dict], names: list[str], **extra) -> dict:
    """The JSON document of a side-by-side run: the command that repeats it, the host's CPU model,
    ``extra`` fields, greedy identity with plain (and divergences that are not bf16 ties), the
    summary (``summarise``) and every per-prompt record."""
    from common.host import cpu_model
    return {"command": f"PYTHONPATH=$PWD .venv/bin/python benchmarks/{script} " + " ".join(
                f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
            "cpu_model": cpu_model(), "machine": platform.machine(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **extra, "identical_to_plain": all(r["identical"] for r in records),
            "divergences_not_ties": sum(1 for r in records for d in r.get("divergence", {}).values()
                                        if d is not None and not d["tie"]),
            "summary": summarise(records, names), "records": records}


def build_engines(windows: list[int]) -> tuple[dict, object]:
    """({name: LocalEngine}, tokenizer): ``plain`` plus one speculative engine per window
    (``full`` for 0), all over one loaded model pair and one set of measured cost curves."""
    from common.config import load_config
    from common.modeling.build import load_pair
    from treespec.engine import make_engine, measure_costs

    cfg = load_config(None, {})
    main_model, draft, tok = load_pair(cfg)
    costs = measure_costs(main_model, draft)
    engines = {"plain": make_engine(cfg, main_model, None, tok, 1, (0, 0))}
    for w in windows:
        wcfg = replace(cfg, draft_context_window=w)
        engines[f"window_{w}" if w else "full"] = make_engine(wcfg, main_model, draft, tok, 1, None, costs)
    return engines, tok


def run_prompt(engines: dict, i: int, pid: str, category: str, ids: list[int], max_new: int) -> dict:
    """One prompt on every engine (order rotated by ``i``): tokens, seconds and TTFT (s) per
    engine; bf16 divergences from plain classified by plain's logit gap (``divergence``)."""
    from treespec.bench_run import divergence, run_one
    names = list(engines)
    rec = {"id": pid, "category": category, "prompt_tokens": len(ids)}
    order = names[i % len(names):] + names[:i % len(names)]
    runs = {n: run_one(engines[n], f"{n}-{i}", ids, max_new, False) for n in order}
    rec |= {n: {"seconds": r.seconds, "ttft_s": r.ttft, "tokens": r.tokens} for n, r in runs.items()}
    rec["identical"] = all(r.tokens == runs["plain"].tokens for r in runs.values())
    if not rec["identical"]:  # untimed plain re-run for its logit gaps: bf16 ties vs real divergences
        runs["plain"].gaps = run_one(engines["plain"], f"gaps-{i}", ids, max_new, True).gaps
        dtype = engines["plain"].driver.cfg.dtype
        rec["divergence"] = {n: divergence(runs["plain"], r, dtype) for n, r in runs.items()}
    print(json.dumps({"id": pid, "category": category, "prompt_tokens": len(ids),
                      **{n: round(len(rec[n]["tokens"]) / rec[n]["seconds"], 2) for n in names}}), flush=True)
    return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--categories", default="rag,summarization")
    ap.add_argument("--per-category", type=int, default=6)
    ap.add_argument("--stride", type=int, default=13)
    ap.add_argument("--offset", type=int, default=0, help="first prompt index within each category")
    ap.add_argument("--windows", default="128,256,512", help="draft_context_window values besides 0 (full)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--shared-system", type=int, default=0,
                    help="instead: this many requests sharing one long system prompt, in order")
    ap.add_argument("--json", required=True)
    args = ap.parse_args()

    from treespec.generate import encode_prompt

    engines, tok = build_engines([0] + [int(w) for w in args.windows.split(",") if w])
    names = list(engines)
    if args.shared_system:
        prompts = shared_system_prompts(tok, args.shared_system)
    else:
        prompts = [(p.id, p.category, encode_prompt(tok, p.text, p.chat)) for p in
                   pick_prompts(args.categories.split(","), args.per_category, args.stride, args.offset)]
    records = [run_prompt(engines, i, pid, category, ids, args.max_new_tokens)
               for i, (pid, category, ids) in enumerate(prompts)]
    result = result_doc("draft_window.py", args, records, names)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1))
    print(json.dumps(result["summary"]["all"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
