"""Quality, memory and plain-decoding speed of a quantized main model (``main_quantization``
int8 / int4 / w4a8) next to the bf16 model, measured side by side in one run.

Each model is built as served (``build.main_model``: int8 LM head when quantized, kernels chosen
at start). For each HumanEval prompt every model decodes greedily (plain, through the same in-process
engine that serves) and the models take turns prompt by prompt, so a machine whose load
changes affects all of them alike. Quality is stated two ways against bf16's output:
free-running (position of the first token that differs; tokens equal up to there) and
teacher-forced (the quantized model reads bf16's continuation and we count positions whose
greedy token equals bf16's: agreement without the cascade after a first difference).
Memory: bytes of the weights each model holds (layers in their format, the LM head). Speed: decode tokens/s after the first
token and time to first token (prefill). Writes JSON (raw per-prompt records included).

Usage: nice -n 19 .venv/bin/python scripts/quant_quality.py [--prompts 10] [--tokens 64]
       [--schemes none,int8,int4,w4a8] [--json benchmarks/results/quant/quality_speed.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common import wire  # noqa: E402
from common.config import MAIN_QUANTIZATIONS, Config  # noqa: E402
from common.modeling.loader import load_weights  # noqa: E402
from common.modeling.build import main_model  # noqa: E402
from common.modeling.model import DecoderModel  # noqa: E402
from common.modeling.quant import Int4Weight, quantize_main_weights, weight_bytes  # noqa: E402
from services.scheduler.core import SchedulerCore  # noqa: E402
from services.scheduler.local import LocalEngine  # noqa: E402
from services.verifier.runner import VerifierRunner  # noqa: E402
from treespec.bench_data import load_prompts  # noqa: E402

SCHEMES = MAIN_QUANTIZATIONS  # the default --schemes; "none" (the bf16 reference) always runs


def cpu_model() -> str:
    """The CPU model name from lscpu (or platform.processor())."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        return platform.processor() or "unknown"


def plain_engine(model: DecoderModel, max_len: int) -> LocalEngine:
    """Plain greedy decoding (tree_size 0) over ``model`` with one slot."""
    core = SchedulerCore(1, 4, max_len, set())
    return LocalEngine(Config(tree_size=0, max_model_len=max_len), core, VerifierRunner(model, 1, max_len + 16), None)


def decode(engine: LocalEngine, rid: str, ids: list[int], n: int) -> dict:
    """Greedy ``n`` tokens: tokens, time to first token (s) and decode tokens/s after it."""
    params = wire.SamplingParams(max_tokens=n, ignore_eos=True)
    out, t0, first = [], time.perf_counter(), None
    for delta in engine.generate(rid, ids, params):
        out += delta.tokens
        first = first or time.perf_counter()
    end = time.perf_counter()
    return {"tokens": out, "ttft_s": first - t0, "decode_tok_s": (len(out) - 1) / max(end - first, 1e-9)}


def teacher_forced(model: DecoderModel, ids: list[int], cont: list[int]) -> list[int]:
    """``model``'s greedy token at each position of ``cont`` given ``ids + cont[:i]`` (one pass)."""
    seq = torch.tensor([ids + cont[:-1]])  # [1, T]
    T = seq.shape[1]
    cache = model.new_cache(1, T)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))[None, None]  # [1, 1, T, T]
    h = model.forward(seq, torch.arange(T)[None], cache, [cache.allocate()], mask)[0]  # [T, H]
    return model.logits(h[len(ids) - 1:]).argmax(-1).tolist()


def compare(ref: list[int], out: list[int], forced: list[int]) -> dict:
    """First differing position (len if none) and teacher-forced agreement with ``ref``."""
    first = next((i for i, (a, b) in enumerate(zip(ref, out)) if a != b), len(ref))
    return {"first_divergence": first, "forced_agreement": sum(a == b for a, b in zip(ref, forced)) / len(ref)}


def served_bytes(weights: dict, scheme: str) -> dict:
    """Bytes of the served model's weights: all, the layers' projections, and the LM head (w4a8: int4
    codes with bf16 scales and zeros per group of 64, the W4A8 kernel's; int8 and int4: int8 with bf16 row
    scales; none: the bf16 matrix; a tied head is held besides the embedding)."""
    q = {k: replace(v, codes=None) if isinstance(v, Int4Weight) else v  # codes live only until repacked
         for k, v in quantize_main_weights(weights, scheme, torch.bfloat16).items()}
    rows, cols = weights["lm_head"].shape
    head = {"none": rows * cols * 2, "w4a8": rows * cols // 2 + rows * (cols // 64) * 4}.get(scheme, rows * cols + rows * 2)
    if scheme != "none":  # the quantized head replaces the bf16 one (a tied one stays the embedding)
        q.pop("lm_head")
    layers = weight_bytes({k: v for k, v in q.items() if k.startswith("layers.")})
    return {"weight_bytes": weight_bytes(q) + (head if scheme != "none" else 0),
            "layer_weight_bytes": layers, "lm_head_bytes": head}


def summary(records: list[dict], scheme: str, nbytes: dict) -> dict:
    """Means over prompts for one scheme, and the bytes of its weights (``served_bytes``)."""
    rs = [r[scheme] for r in records]
    mean = lambda key: sum(r[key] for r in rs) / len(rs)  # noqa: E731
    identical = sum(r["first_divergence"] == len(r["tokens"]) for r in rs)
    return {**nbytes,
            "decode_tok_s": mean("decode_tok_s"), "ttft_s": mean("ttft_s"),
            "first_divergence_mean": mean("first_divergence"), "identical_prompts": identical,
            "forced_agreement": mean("forced_agreement")}


def write_json(path: str, data: dict) -> None:
    """Write atomically (temp file, then rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(target)


def run(args: argparse.Namespace) -> dict:
    schemes = ("none", *[s for s in args.schemes.split(",") if s and s != "none"])
    _, weights, tok = load_weights(args.model, "bfloat16")
    # the models as served: build.main_model (int8 LM head when quantized, kernels chosen at start)
    models = {s: main_model(Config(main_model_path=args.model, main_quantization=s))[0] for s in schemes}
    models_bytes = {s: served_bytes(weights, s) for s in schemes}
    prompts = load_prompts("humaneval", args.prompts)
    max_len = 1024
    engines = {s: plain_engine(m, max_len) for s, m in models.items()}
    records, load_before = [], os.getloadavg()
    for i, p in enumerate(prompts):
        ids = tok(p.text)["input_ids"]
        rec = {"id": p.id, "prompt_tokens": len(ids)}
        for s in schemes:
            rec[s] = decode(engines[s], f"{s}{i}", ids, args.tokens)
        ref = rec["none"]["tokens"]
        for s in schemes:
            rec[s].update(compare(ref, rec[s]["tokens"], teacher_forced(models[s], ids, ref)))
        records.append(rec)
        print(p.id, {s: (rec[s]["first_divergence"], round(rec[s]["decode_tok_s"], 2)) for s in schemes}, flush=True)
        write_json(args.json, result(args, schemes, models_bytes, records, load_before, complete=i == len(prompts) - 1))
    return result(args, schemes, models_bytes, records, load_before, complete=True)


def result(args, schemes: tuple[str, ...], models_bytes: dict, records: list[dict], load_before, complete: bool) -> dict:
    """The JSON document (``complete`` False while prompts remain: partial results are kept)."""
    return {"complete": complete, "command": "scripts/quant_quality.py " + " ".join(sys.argv[1:]), "model": args.model,
            "cpu_model": cpu_model(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "dtype": "bfloat16",
            "prompts": len(records), "tokens": args.tokens, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "summary": {s: summary(records, s, models_bytes[s]) for s in schemes}, "records": records}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--schemes", default=",".join(SCHEMES), help="main_quantization values beside bf16 (none)")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "quant" / "quality_speed.json"))
    args = parser.parse_args()
    doc = run(args)
    write_json(args.json, doc)
    print(json.dumps({"cpu_model": doc["cpu_model"], "summary": doc["summary"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
