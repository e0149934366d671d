"""``treespec bench``: plain decoding vs treespec speculation (vs HF assisted generation),
in one process and one run, on the same prompts; JSON out, optional plots.

Repeat: ``treespec bench --dataset humaneval --limit 20 --max-new-tokens 128 \
--baseline hf-assisted --json bench-out/humaneval.json``

Against a running deployment (no model loaded here): ``treespec bench --url
http://127.0.0.1:8000 --concurrency 1,2,4,8 --dataset spec_bench --json bench-out/http.json``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from common.config import MAIN_QUANTIZATIONS, ConfigError, load_config

NO_LOOKUP = "spec-no-lookup"  # --baseline: speculation with prompt lookup off
IN_PROCESS = "in-process"  # --baseline with --url: the same speculation in this process, interleaved
CONFIG_ERRORS = (ConfigError, ValueError, FileNotFoundError)  # bad flags, config or dataset: exit 2


def configure(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--dataset", default="humaneval", help="humaneval | spec_bench[:category] | a text file (default humaneval)")
    a("--limit", type=int, default=None, help="number of prompts (default: all; spec_bench: spread over categories)")
    a("--max-new-tokens", type=int, default=128, help="tokens per request (default 128)")
    a("--json", required=True, help="output JSON path")
    a("--baseline", default="", help="comma list: hf-assisted, hf-plain, spec-no-lookup (speculation with "
                                     "prompt lookup off, interleaved with the other runs); with --url: plain "
                                     "(the same deployment, requests with speculation off, interleaved) or "
                                     "in-process (one stream over HTTP against this process's own speculative "
                                     "engine built from --config and the model flags, prompt by prompt)")
    a("--tree-size", default=None, help="tree nodes for the spec run (default: config, 'auto')")
    a("--tree-sizes", default="", help="also sweep these tree sizes, e.g. 1,4,8,16,32,64,128")
    a("--concurrency", default="", help="also measure aggregate throughput at these batch sizes, e.g. 1,2,4,8 "
                                         "(with --url: requests in flight; every prompt is sent once per level; default 1)")
    a("--url", default=None, help="benchmark a running gateway over HTTP (the in-process runs are skipped; "
                                  "--baseline in-process adds one in-process arm)")
    a("--repeat", type=int, default=1, help="with --url: run each level this many times per mode, pooled; with "
                                            "--baseline plain in mirrored order (plain, spec, spec, plain), "
                                            "which cancels a host's steady drift (default 1)")
    a("--plots", default=None, help="directory for PNG plots")
    a("--ignore-eos", action="store_true", help="always generate --max-new-tokens tokens (long-output runs)")
    a("--config", default=None)
    a("--model-path", default=None)
    a("--draft-model-path", default=None)
    a("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    a("--main-quantization", default=None, choices=MAIN_QUANTIZATIONS,
      help="quantized main model (CPU): weight-only int8 / int4, or w4a8 (int4 weights, int8 activations)")
    a("--device", default=None)


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise ConfigError(f"expected a comma-separated list of integers, got {text!r}") from exc


def write_json(path: str, data: dict) -> None:
    """Write atomically: a temp file in the same directory, then rename."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".bench-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, target)


def _config(args: argparse.Namespace):
    """The bench's Config: ``--config`` with the model flags on top. Raises ConfigError / ValueError."""
    return load_config(args.config, {"main_model_path": args.model_path, "draft_model_path": args.draft_model_path,
                                     "tree_size": args.tree_size, "dtype": args.dtype, "device": args.device,
                                     "main_quantization": args.main_quantization})


def _suite(cfg, prompts, *args):
    """``bench_suite.Suite(cfg, prompts, *args)`` (loads the models), or None after printing why a model
    could not load (missing path, unreadable or mismatched file)."""
    from treespec.bench_suite import Suite
    try:
        return Suite(cfg, prompts, *args)
    except (FileNotFoundError, ValueError) as exc:
        print(f"treespec bench: cannot load the models: {exc}", file=sys.stderr)
        return None


def run(args: argparse.Namespace) -> int:
    if args.url:
        return run_http(args)
    from treespec.bench_data import load_prompts
    try:
        cfg = _config(args)
        prompts = load_prompts(args.dataset, args.limit)
        sizes, conc = _ints(args.tree_sizes), _ints(args.concurrency)
        baselines = [b for b in args.baseline.split(",") if b]
        bad = [b for b in baselines if b not in ("hf-assisted", "hf-plain", NO_LOOKUP)]
        if bad:
            raise ConfigError(f"unknown --baseline {bad[0]!r}: use hf-assisted, hf-plain and/or {NO_LOOKUP}")
        if args.max_new_tokens < 1:
            raise ConfigError("--max-new-tokens must be at least 1")
        if args.repeat != 1:
            raise ConfigError("--repeat needs --url (the in-process bench interleaves its arms prompt by prompt)")
    except CONFIG_ERRORS as exc:
        print(f"treespec bench: {exc}", file=sys.stderr)
        return 2
    suite = _suite(cfg, prompts, args.max_new_tokens, max(conc or [1]), args.ignore_eos, NO_LOOKUP in baselines)
    if suite is None:
        return 2
    result = suite.compare()
    hf = [b for b in baselines if b != NO_LOOKUP]
    if hf:
        result["aggregate"].update(suite.hf_baselines(hf, result["records"]))
    if sizes:
        result["tree_size_sweep"] = suite.sweep(sizes)
    if conc:
        result["concurrency"] = suite.concurrency(conc)
    result["command"] = "treespec " + " ".join(sys.argv[1:])
    write_json(args.json, result)
    if args.plots:
        from treespec.bench_plot import plot_all
        plot_all(result, Path(args.plots))
    print(json.dumps(result["aggregate"], indent=2))
    return 0


def run_http(args: argparse.Namespace) -> int:
    """``--url``: concurrency rows measured over HTTP; the in-process runs are skipped."""
    from treespec.bench_data import load_prompts
    from treespec.bench_http import HTTP_ERRORS, concurrency
    try:
        levels = _ints(args.concurrency) or [1]
        if args.max_new_tokens < 1 or min(levels) < 1 or args.repeat < 1:
            raise ConfigError("--max-new-tokens, --repeat and every --concurrency level must be at least 1")
        if args.tree_sizes or args.baseline not in ("", "plain", IN_PROCESS):
            raise ConfigError(f"with --url only --baseline plain or {IN_PROCESS} is measured; --tree-sizes and "
                              "the other baselines need the in-process bench")
        if args.baseline == IN_PROCESS and levels != [1]:
            raise ConfigError(f"--baseline {IN_PROCESS} measures one stream: drop --concurrency")
        prompts = load_prompts(args.dataset, args.limit)
        if not prompts:
            raise ConfigError(f"dataset {args.dataset!r} has no prompts")
    except CONFIG_ERRORS as exc:
        print(f"treespec bench: {exc}", file=sys.stderr)
        return 2
    if args.baseline == IN_PROCESS:
        return run_interleaved(args, prompts)
    try:
        rows = concurrency(args.url, prompts, args.max_new_tokens, levels, plain=args.baseline == "plain",
                           repeat=args.repeat)
    except HTTP_ERRORS as exc:
        print(f"treespec bench: {args.url}: {exc}", file=sys.stderr)
        return 1
    from common.host import cpu_model  # torch-free
    result = {"config": {"url": args.url, "dataset": args.dataset, "prompts": len(prompts),
                         "max_new_tokens": args.max_new_tokens, "repeat": args.repeat, "cpu_model": cpu_model(),
                         "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
              "concurrency": rows, "command": "treespec " + " ".join(sys.argv[1:])}
    write_json(args.json, result)
    if args.plots:
        from treespec.bench_plot import plot_all
        plot_all(result, Path(args.plots))
    print(json.dumps(rows, indent=2))
    return 0


def run_interleaved(args: argparse.Namespace, prompts) -> int:
    """``--url --baseline in-process``: one HTTP stream against this process's engine, prompt by
    prompt in mirrored order (``treespec.bench_interleave``); loads the pair from the bench's config."""
    from treespec.bench_http import HTTP_ERRORS
    from treespec.bench_interleave import check_ready, interleave
    try:
        check_ready(args.url)  # before the models load: a wrong URL fails in a second, not after a minute
    except HTTP_ERRORS as exc:
        print(f"treespec bench: {args.url}: {exc}", file=sys.stderr)
        return 1
    try:
        cfg = _config(args)
    except CONFIG_ERRORS as exc:
        print(f"treespec bench: {exc}", file=sys.stderr)
        return 2
    print(f"treespec bench: {args.url} is ready; loading {cfg.main_model_path} + {cfg.draft_model_path} here for the "
          "in-process arm (the deployment's config must match: not checked)", file=sys.stderr)
    suite = _suite(cfg, prompts, args.max_new_tokens, 1)
    if suite is None:
        return 2
    try:
        got = interleave(args.url, suite.engine(suite.tree), suite.tok, prompts, suite.ids, args.max_new_tokens,
                         args.repeat)
    except HTTP_ERRORS as exc:
        print(f"treespec bench: {args.url}: {exc}", file=sys.stderr)
        return 1
    result = {"config": {"url": args.url, **suite.describe()}, "interleaved": got,
              "command": "treespec " + " ".join(sys.argv[1:])}
    write_json(args.json, result)
    print(json.dumps({k: v for k, v in got.items() if k != "pairs"}, indent=2))
    return 0
