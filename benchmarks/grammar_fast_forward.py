"""Grammar fast-forward on the real pair: MAL of json_schema requests with forced-text
insertion on vs off, side by side in one process.

The model pair is loaded once; two in-process engines share it (same tree shape), one with
``grammar_fast_forward`` on and one off. The 10 prompts and the schema of
``scripts/openai_features_demo.py`` (chat template, json_schema strict, greedy) run as one
batch on each engine. MAL = output tokens / verification steps per sequence; it does not
depend on the machine's load. Greedy outputs must be identical on and off.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/grammar_fast_forward.py --tree-size 8 --depth 4 \
        --max-new-tokens 48 --json benchmarks/results/openai_features/grammar_fast_forward.json
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import wire  # noqa: E402
from common.config import load_config  # noqa: E402
from services.gateway.grammars import json_grammar  # noqa: E402

SYSTEM = "Answer only with a JSON object with keys name, arguments, pure."


def demo():
    """(TASKS, SCHEMA) of scripts/openai_features_demo.py (no openai import needed)."""
    import ast
    tree = ast.parse((ROOT / "scripts" / "openai_features_demo.py").read_text())
    found = {t.id: ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
             for t in n.targets if isinstance(t, ast.Name) and t.id in ("TASKS", "SCHEMA")}
    return found["TASKS"], found["SCHEMA"]


def run_batch(engine, prompts: list[list[int]], params: wire.SamplingParams) -> dict:
    """All prompts at once; per request (tokens, committed-per-step list), and seconds."""
    out = {f"r{i}": [] for i in range(len(prompts))}
    steps = {rid: [] for rid in out}
    for i, p in enumerate(prompts):
        engine.submit(f"r{i}", p, params)
    done, t0 = set(), time.perf_counter()
    while len(done) < len(out):
        for d in engine.step():
            out[d.request_id] += d.tokens
            steps[d.request_id] += [len(d.tokens)] if d.tokens else []
            done |= {d.request_id} if d.finish is not None else set()
    return {"tokens": out, "steps": steps, "s": time.perf_counter() - t0}


def summary(res: dict) -> dict:
    toks = sum(len(t) for t in res["tokens"].values())
    steps = sum(len(s) for s in res["steps"].values())
    return {"output_tokens": toks, "verification_steps": steps, "mal": round(toks / steps, 3),
            "seconds": round(res["s"], 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree-size", type=int, default=8)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from common.modeling.build import load_pair
    from treespec.engine import make_engine
    import jsonschema
    tasks, schema = demo()
    cfg = load_config(None, {"tree_size": args.tree_size, "max_accept_length": args.depth, "max_model_len": 1024})
    main_m, draft_m, tok = load_pair(cfg)
    prompts = [tok(tok.apply_chat_template([{"role": "system", "content": SYSTEM}, {
        "role": "user", "content": f"Describe a Python function that {t}."}], tokenize=False,
        add_generation_prompt=True), add_special_tokens=False)["input_ids"] for t in tasks]
    params = wire.SamplingParams(max_tokens=args.max_new_tokens, temperature=0.0, grammar=json_grammar(schema))
    results = {}
    for label, ff in (("on", True), ("off", False)):
        engine = make_engine(replace(cfg, grammar_fast_forward=ff), main_m, draft_m, tok, len(prompts),
                             (args.tree_size, args.depth))
        results[label] = run_batch(engine, prompts, params)
        print(label, summary(results[label]), flush=True)
    texts = {rid: tok.decode(t, skip_special_tokens=True) for rid, t in results["on"]["tokens"].items()}
    valid = 0
    for text in texts.values():
        try:
            jsonschema.validate(json.loads(text), schema)
            valid += 1
        except (ValueError, jsonschema.ValidationError):
            pass
    report = {
        "command": "PYTHONPATH=$PWD python " + " ".join(sys.argv),
        "cpu": subprocess.run(["lscpu"], capture_output=True, text=True).stdout.split("Model name:")[-1]
        .splitlines()[0].strip(), "python": platform.python_version(),
        "models": [cfg.main_model_path, cfg.draft_model_path], "tree_size": args.tree_size, "depth": args.depth,
        "max_new_tokens": args.max_new_tokens, "prompts": len(prompts),
        "fast_forward_on": summary(results["on"]), "fast_forward_off": summary(results["off"]),
        "identical_outputs": results["on"]["tokens"] == results["off"]["tokens"],
        "schema_valid_on": f"{valid}/{len(texts)}",
        "texts_on": texts,
    }
    print(json.dumps({k: v for k, v in report.items() if k != "texts_on"}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
