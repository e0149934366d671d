"""The draft's W4A8 kernel (int8 activations, VNNI dot products) against its bf16-activation
int4 kernels, side by side in one process.

One process loads the main model once and the draft model twice: once with the W4A8 kernel a
candidate of its kernel probe (the default where AVX512-VNNI exists), once without it
(``TREESPEC_W4A8=0`` while it loads: the probe then picks among torch's int4 kernel, the packed
int4 kernel and the dense copy, as before). Three in-process engines (one request at a time,
``tree_size`` auto, each speculative engine with its own measured cost curves): ``plain``,
``spec_w4a8`` and ``spec_int4``. Each prompt runs on every engine, the order rotating from
prompt to prompt so machine noise hits all alike. Reports end-to-end tokens/s per engine and
category, mean accepted length per speculative engine, the draft kernel plans, and whether
every speculative output equals plain greedy decoding (the draft's kernel must not change
the output: the main model decides every token).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/draft_kernel.py --dataset humaneval --limit 10 \\
        --max-new-tokens 128 --json benchmarks/results/draft_kernel/humaneval.json
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from draft_window import result_doc, run_prompt  # same directory: python puts it on sys.path


def build_engines() -> tuple[dict, object, dict]:
    """({name: LocalEngine}, tokenizer, {name: draft kernel ladders})."""
    from common.config import load_config
    from common.modeling.build import draft_model, main_model
    from treespec.engine import make_engine, measure_costs

    cfg = load_config(None, {})
    main, tok = main_model(cfg)
    drafts = {}
    for name, w4a8 in (("spec_w4a8", "1"), ("spec_int4", "0")):
        os.environ["TREESPEC_W4A8"] = w4a8  # read by kernels.candidates while the draft's plan is made
        drafts[name] = draft_model(cfg)[0]
    os.environ.pop("TREESPEC_W4A8")
    engines = {"plain": make_engine(cfg, main, None, tok, 1, (0, 0))}
    for name, draft in drafts.items():
        engines[name] = make_engine(cfg, main, draft, tok, 1, None, measure_costs(main, draft))
    plans = {n: {f: [list(s) for s in steps] for f, steps in d.kernel_plan.ladders.items()} for n, d in drafts.items()}
    return engines, tok, plans


def run_all(engines: dict, prompts: list, max_new: int) -> tuple[list[dict], dict[str, float]]:
    """Every prompt on every engine (``draft_window.run_prompt``); also each speculative
    engine's mean accepted length: tokens committed per decode round (bonus token included),
    each request's first round left out (its prefill commits the first token alone)."""
    records, tokens, rounds = [], dict.fromkeys(engines, 0), dict.fromkeys(engines, 0)
    for i, (pid, category, ids) in enumerate(prompts):
        start = {n: len(e.stats.committed) for n, e in engines.items()}
        records.append(run_prompt(engines, i, pid, category, ids, max_new))
        for n, e in engines.items():
            decode = e.stats.committed[start[n] + 1:]
            tokens[n], rounds[n] = tokens[n] + sum(decode), rounds[n] + len(decode)
    return records, {n: round(tokens[n] / rounds[n], 3) for n in engines if n != "plain" and rounds[n]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="humaneval", help="humaneval | spec_bench")
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()

    from treespec.bench_data import load_prompts
    from treespec.generate import encode_prompt

    engines, tok, plans = build_engines()
    names = list(engines)
    prompts = [(p.id, p.category, encode_prompt(tok, p.text, p.chat)) for p in load_prompts(args.dataset, args.limit)]
    records, mal = run_all(engines, prompts, args.max_new_tokens)
    result = result_doc("draft_kernel.py", args, records, names, draft_kernel_plans=plans, mean_accepted_length=mal)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1))
    print(json.dumps({"summary": result["summary"]["all"], "mal": result["mean_accepted_length"],
                      "plans": plans}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
