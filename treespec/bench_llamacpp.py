"""llama.cpp on the prompts of ``treespec bench``: plain greedy decoding of the 4-bit GGUF and its BF16 copy,
greedy speculative decoding with the 0.5B draft, and ``llama-bench`` prompt/generation rows.

Prompts come from ``treespec.bench_data`` and go through the same chat template as ``treespec bench``
(``treespec.generate.encode_prompt``); each is written to a text file that the tools read with ``-f`` and
``--no-escape``, and the tool's own prompt token count is recorded beside ours (``prompt_tokens_match``).

    python -m treespec.bench_llamacpp --bin ~/.cache/treespec/llamacpp/0.3.36/build/bin \
        --dataset humaneval --limit 20 --max-new-tokens 128 --json benchmarks/results/llamacpp/humaneval.json \
        [--treespec-json bench.json]   # also merge a ``treespec bench`` JSON and print the side-by-side table

``benchmarks/side_by_side.sh`` runs the whole comparison. Times: seconds unless a key ends in ``_ms``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from common.host import cpu_model
from treespec import llamacpp_parse as parse

BF16_DIR = Path.home() / ".cache" / "treespec" / "llamacpp"  # benchmarks/llamacpp.sh writes the BF16 GGUF here
TOOL_TIMEOUT_S = 900
RUNS = ("plain-q4", "plain-bf16", "spec-q4", "spec-bf16")  # one prompt / one llama-bench call; a hung tool fails the run instead of stalling it


class LlamaCppError(RuntimeError):
    """A llama.cpp tool is missing, exited non-zero or timed out."""


@dataclass(frozen=True)
class Tools:
    """Where the built llama.cpp binaries are and the settings shared by every call."""

    bin_dir: Path
    threads: int = 2
    ctx: int = 8192  # context and batch size: the longest Spec-Bench prompts fit in one batch

    def command(self, tool: str, *args: str | int | float) -> list[str]:
        path = self.bin_dir / tool
        if not path.is_file():
            raise LlamaCppError(f"{path} not found: build it with benchmarks/llamacpp.sh")
        return [str(path), *map(str, args), "-t", str(self.threads)]

    def run(self, cmd: list[str]) -> str:
        """stdout + stderr of ``cmd`` (the tools log to stderr). Raises LlamaCppError on failure."""
        try:
            done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  errors="replace", timeout=TOOL_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise LlamaCppError(f"timed out after {TOOL_TIMEOUT_S} s: {shlex.join(cmd)}") from exc
        if done.returncode != 0:
            raise LlamaCppError(f"exit {done.returncode}: {shlex.join(cmd)}\n{done.stderr[-2000:]}")
        return done.stdout + "\n" + done.stderr


def render_prompts(prompts, tok, out_dir: Path) -> list[dict]:
    """Write each prompt, chat template applied as in ``treespec bench``, to ``out_dir/<i>.txt``.

    Returns one dict per prompt: id, category, path, tokens (our token count of the written text).
    """
    from treespec.generate import encode_prompt
    rows = []
    for i, p in enumerate(prompts):
        text = (tok.apply_chat_template([{"role": "user", "content": p.text}], tokenize=False,
                                        add_generation_prompt=True) if p.chat else p.text)
        path = out_dir / f"{i}.txt"
        path.write_text(text)
        rows.append({"id": p.id, "category": p.category, "path": str(path),
                     "tokens": len(encode_prompt(tok, p.text, p.chat))})
    return rows


def _greedy_args(prompt: dict, max_new: int, ctx: int) -> list:
    return ["-f", prompt["path"], "-n", max_new, "-c", ctx, "-b", ctx, "--temp", 0, "--seed", 0, "--no-escape"]


def plain_runs(tools: Tools, model: Path, prompts: list[dict], max_new: int) -> dict:
    """``llama-completion`` greedy, one process per prompt. Seconds = prompt + eval + sampling time."""
    records = []
    for p in prompts:
        cmd = tools.command("llama-completion", "-m", model, *_greedy_args(p, max_new, tools.ctx), "-no-cnv",
                            "--no-display-prompt")
        r = parse.parse_completion(tools.run(cmd))
        r.update(id=p["id"], category=p["category"], command=shlex.join(cmd),
                 prompt_tokens_match=r["prompt_tokens"] == p["tokens"],
                 seconds=(r["prompt_ms"] + r["eval_ms"] + r["sampling_ms"]) / 1e3)
        records.append(r)
    gen = sum(r["generated_tokens"] for r in records)
    return {"model": str(model), "records": records, "aggregate": {
        "tokens_per_s": gen / sum(r["seconds"] for r in records),
        "decode_tokens_per_s": sum(r["eval_runs"] for r in records) / sum(r["eval_ms"] for r in records) * 1e3,
        "prompt_tokens_per_s": sum(r["prompt_tokens"] for r in records) / sum(r["prompt_ms"] for r in records) * 1e3,
        "generated_tokens": gen, "prompts": len(records)}}


def spec_runs(tools: Tools, model: Path, draft: Path, prompts: list[dict], max_new: int,
              draft_max: int | None) -> dict:
    """``llama-speculative-simple`` greedy (the algorithm llama-server uses with ``-md``), one process per
    prompt; ``draft_max`` None keeps llama.cpp's default draft length. Seconds = encode + decode. This
    llama.cpp needs ``--spec-type draft-simple`` with ``-md`` (without it: "no implementations specified for
    speculative decoding")."""
    records = []
    extra = [] if draft_max is None else ["--spec-draft-n-max", draft_max]
    for p in prompts:
        cmd = tools.command("llama-speculative-simple", "-m", model, "-md", draft, "--spec-type", "draft-simple",
                            *_greedy_args(p, max_new, tools.ctx), *extra)
        r = parse.parse_speculative(tools.run(cmd))
        r.update(id=p["id"], category=p["category"], command=shlex.join(cmd),
                 prompt_tokens_match=r["prompt_tokens"] == p["tokens"], seconds=r["encode_s"] + r["decode_s"])
        records.append(r)
    gen, acc = sum(r["generated_tokens"] for r in records), sum(r["n_accept"] for r in records)
    drafted = sum(r["n_drafted"] for r in records)
    return {"model": str(model), "draft": str(draft), "records": records, "aggregate": {
        "tokens_per_s": gen / sum(r["seconds"] for r in records),
        "decode_tokens_per_s": gen / sum(r["decode_s"] for r in records),
        "prompt_tokens_per_s": sum(r["prompt_tokens"] for r in records) / sum(r["encode_s"] for r in records),
        "acceptance_rate": acc / drafted if drafted else 0.0,
        "mean_accepted_length": gen / (gen - acc) if gen > acc else 0.0,
        "n_draft": records[0]["n_draft"] if records else None, "generated_tokens": gen, "prompts": len(records)}}


def bench_rows(tools: Tools, models: list[Path], n_prompt: str, n_gen: int, reps: int) -> dict:
    """``llama-bench -p n_prompt -n n_gen -r reps -o json`` over ``models`` (one process); ``n_prompt`` is
    llama-bench's comma list of prompt lengths (tokens), one prompt-processing row per length."""
    args = [a for m in models for a in ("-m", m)]
    cmd = tools.command("llama-bench", *args, "-p", n_prompt, "-n", n_gen, "-r", reps, "-o", "json")
    return {"command": shlex.join(cmd), "rows": parse.parse_bench_json(tools.run(cmd))}


def source_info(bin_dir: Path) -> str:
    """What benchmarks/llamacpp.sh recorded beside the build (sdist version, vendored llama.cpp commit)."""
    path = bin_dir.parent / "SOURCE"
    return path.read_text().strip() if path.is_file() else "unknown (not built by benchmarks/llamacpp.sh)"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m treespec.bench_llamacpp", description=__doc__.split("\n")[0])
    a = p.add_argument
    a("--bin", required=True, help="directory holding the llama.cpp binaries (benchmarks/llamacpp.sh prints it)")
    a("--dataset", default="humaneval")
    a("--limit", type=int, default=None)
    a("--max-new-tokens", type=int, default=128)
    a("--threads", type=int, default=2)
    a("--model", default="qwen2.5-coder-1.5b", help="main GGUF (packaged name or path): its file's 4-bit type")
    a("--bf16-model", default=None,
      help=f"BF16 GGUF of the main model (default: {BF16_DIR}/<main>.bf16.gguf, made by benchmarks/llamacpp.sh)")
    a("--draft", default="qwen2.5-coder-0.5b", help="draft GGUF (packaged name or path)")
    a("--draft-max", type=int, default=None, help="llama.cpp's --spec-draft-n-max (default: llama.cpp's)")
    a("--bench-reps", type=int, default=3, help="llama-bench repetitions (0: skip llama-bench)")
    a("--bench-prompt-tokens", default="256,1500",
      help="llama-bench prompt lengths (comma list, tokens): prompt-processing rows, e.g. for a 1,500-token prompt")
    a("--skip", default="", help="comma list of runs to leave out: plain-q4, plain-bf16, spec-q4, spec-bf16")
    a("--treespec-json", action="append", default=[],
      help="a `treespec bench` JSON of the same prompts, merged in (repeat for a quantized-main run)")
    a("--json", required=True, help="output JSON path")
    return p


def measure(args: argparse.Namespace, tools: Tools, models: dict[str, Path], prompt_dir: Path) -> dict:
    """Every llama.cpp run the arguments ask for, on the rendered prompts; the result JSON (no treespec part)."""
    from common.modeling.loader import load_weights_tokenizer_only
    from treespec.bench_data import load_prompts
    probe = tools.run(tools.command("llama-completion", "--version"))  # fails fast on a missing build
    chosen = load_prompts(args.dataset, args.limit)
    if not chosen:
        raise ValueError(f"dataset {args.dataset!r} has no prompts")
    prompts = render_prompts(chosen, load_weights_tokenizer_only(args.model), prompt_dir)
    skip = set(filter(None, args.skip.split(",")))
    if skip - set(RUNS):
        raise ValueError(f"unknown --skip {sorted(skip - set(RUNS))}: use {', '.join(RUNS)}")
    todo = {"plain-q4": lambda: plain_runs(tools, models["q4"], prompts, args.max_new_tokens),
            "plain-bf16": lambda: plain_runs(tools, models["bf16"], prompts, args.max_new_tokens),
            "spec-q4": lambda: spec_runs(tools, models["q4"], models["draft"], prompts, args.max_new_tokens,
                                         args.draft_max),
            "spec-bf16": lambda: spec_runs(tools, models["bf16"], models["draft"], prompts, args.max_new_tokens,
                                           args.draft_max)}
    runs, failed = {}, {}
    for label in [r for r in RUNS if r not in skip]:
        try:
            runs[label] = todo[label]()
        except (LlamaCppError, parse.LlamaCppOutputError) as exc:  # one failed tool costs its row, not the run
            failed[label] = str(exc)[-2000:]
    bench = (bench_rows(tools, [models["q4"], models["bf16"]], args.bench_prompt_tokens, 128, args.bench_reps)
             if args.bench_reps else None)
    llama_cpp = {**parse.parse_version(probe), "source": source_info(tools.bin_dir)}
    return {"config": {"dataset": args.dataset, "prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
                       "threads": args.threads, "cpu_model": cpu_model(), "llama_cpp": llama_cpp,
                       "models": {k: str(v) for k, v in models.items()},
                       "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
            "runs": runs, "failed_runs": failed, "llama_bench": bench}


def main(argv: list[str] | None = None) -> int:
    from common.models import resolve
    from treespec.bench import write_json
    from treespec.bench_compare import attach_treespec, markdown
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    try:
        if args.max_new_tokens < 1 or args.threads < 1 or args.bench_reps < 0:
            raise ValueError("--max-new-tokens and --threads must be >= 1, --bench-reps >= 0")
        q4 = resolve(args.model)
        models = {"q4": q4, "bf16": Path(args.bf16_model) if args.bf16_model else BF16_DIR / f"{q4.stem}.bf16.gguf",
                  "draft": resolve(args.draft)}
        missing = [str(p) for p in models.values() if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"missing GGUF file(s): {', '.join(missing)} (benchmarks/llamacpp.sh makes "
                                    "the BF16 one; `treespec models fetch` the others)")
        tools = Tools(Path(args.bin).expanduser(), args.threads)
        with tempfile.TemporaryDirectory(prefix="treespec-llamacpp-") as tmp:
            result = measure(args, tools, models, Path(tmp))
        result["command"] = shlex.join([sys.executable, "-m", "treespec.bench_llamacpp", *argv])
        for path in args.treespec_json:
            try:
                bench = json.loads(Path(path).read_text())
                quant = bench["config"].get("main_quantization", "none")
                attach_treespec(result, bench, "treespec" if "treespec" not in result else f"treespec_{quant}")
            except KeyError as exc:
                raise ValueError(f"{path} is not a `treespec bench` result (no {exc})") from exc
    except (ValueError, LlamaCppError, OSError) as exc:  # FileNotFoundError is an OSError
        print(f"bench_llamacpp: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, (LlamaCppError, parse.LlamaCppOutputError)) else 2
    write_json(args.json, result)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
