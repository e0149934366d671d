"""One side-by-side result from a ``treespec.bench_llamacpp`` JSON and a ``treespec bench`` JSON of the
same prompts, and its Markdown table (printed by ``benchmarks/side_by_side.sh`` and ``benchmarks/report.py``).

Throughput columns (tokens/s): *end to end* = generated tokens / (prompt pass + decoding), summed over the
prompts; *decode* = after the first token; *prompt* = prompt tokens / prompt-pass time. Ratios divide
end-to-end figures of the same run on the same host.
"""

from __future__ import annotations

LLAMA_ROWS = (("plain-q4", "4-bit file", "plain"), ("plain-bf16", "BF16 (from the 4-bit file)", "plain"),
              ("spec-q4", "4-bit file + 0.5B draft", "speculative"),
              ("spec-bf16", "BF16 + 0.5B draft", "speculative"))


def _ttft_rate(records: list[dict], kind: str) -> float:
    """Prompt tokens per second of time to first token (prefill of main and draft + first token)."""
    secs = sum(r[kind]["ttft"] for r in records)
    return sum(r["prompt_tokens"] for r in records) / secs if secs else 0.0


def attach_treespec(result: dict, bench: dict, key: str = "treespec") -> dict:
    """Add ``bench`` (a ``treespec bench`` result) to ``result`` under ``key`` (``treespec`` for the first
    run, ``treespec_<main_quantization>`` for a quantized main model); ``same_prompts`` says whether every
    run so far used the same prompt ids in the same order. Returns ``result``. Raises KeyError on a JSON
    that is not a ``treespec bench`` result."""
    agg, recs = bench["aggregate"], bench["records"]
    result[key] = {
        "command": bench.get("command"), "config": bench["config"],
        "plain": {"tokens_per_s": agg["plain_tokens_per_s"], "decode_tokens_per_s": agg["plain_decode_tokens_per_s"],
                  "prompt_tokens_per_s": _ttft_rate(recs, "plain")},
        "spec": {"tokens_per_s": agg["spec_tokens_per_s"], "decode_tokens_per_s": agg["spec_decode_tokens_per_s"],
                 "prompt_tokens_per_s": _ttft_rate(recs, "spec"), "mean_accepted_length": agg["mean_accepted_length"],
                 "acceptance_rate": agg.get("draft_tokens_accepted_fraction")},
        "aggregate": agg}
    llama_ids = next(([r["id"] for r in run["records"]] for run in result.get("runs", {}).values()), None)
    result["same_prompts"] = result.get("same_prompts", True) and llama_ids == [r["id"] for r in recs]
    return result


def treespec_rows(result: dict, base: dict) -> list[str]:
    """Table rows of every attached ``treespec bench`` run (plain, then tree speculation)."""
    lines = []
    for key in [k for k in result if k == "treespec" or k.startswith("treespec_")]:
        tc = result[key]["config"]
        weights = tc["dtype"] + ("" if tc.get("main_quantization", "none") == "none"
                                 else f" act., {tc['main_quantization']} main")
        lines.append(_row("treespec", weights, "plain", result[key]["plain"], base))
        lines.append(_row("treespec", f"{weights} + 0.5B draft ({tc.get('draft_quantization')})",
                          f"tree ({tc['tree_size']})", result[key]["spec"], base))
    return lines


def _row(engine: str, weights: str, decoding: str, agg: dict, base: dict) -> str:
    mal = agg.get("mean_accepted_length")
    acc = agg.get("acceptance_rate")
    spec = f"{mal:.2f} / {acc:.2f}" if mal is not None and acc is not None else "-"
    ratios = " | ".join(f"{agg['tokens_per_s'] / b:.2f}x" if b else "-" for b in base.values())
    return (f"| {engine} | {weights} | {decoding} | {agg['tokens_per_s']:.2f} | {agg['decode_tokens_per_s']:.2f} | "
            f"{agg['prompt_tokens_per_s']:.1f} | {spec} | {ratios} |")


def markdown(result: dict) -> str:
    """The side-by-side table (plus llama-bench rows) of a ``bench_llamacpp`` result, with the host's CPU."""
    cfg, runs, ts = result["config"], result.get("runs", {}), result.get("treespec")
    build = cfg["llama_cpp"]
    base = {"treespec plain": ts["plain"]["tokens_per_s"] if ts else 0.0,
            "llama.cpp 4-bit plain": runs["plain-q4"]["aggregate"]["tokens_per_s"] if "plain-q4" in runs else 0.0}
    lines = [f"CPU: {cfg['cpu_model']}; llama.cpp {build['commit']} ({build.get('source', '')}); "
             f"{cfg['dataset']}, {cfg['prompts']} prompts, up to {cfg['max_new_tokens']} new tokens, "
             f"{cfg['threads']} threads, greedy", "",
             "| engine | weights | decoding | tok/s end to end | decode tok/s | prompt tok/s | MAL / acceptance | "
             + " | ".join(f"vs {k}" for k in base) + " |", "|---" * (7 + len(base)) + "|"]
    for key, weights, decoding in LLAMA_ROWS:
        if key in runs:
            agg = runs[key]["aggregate"]
            dec = f"{decoding} (draft max {agg['n_draft']})" if "n_draft" in agg else decoding
            lines.append(_row("llama.cpp", weights, dec, agg, base))
    lines += treespec_rows(result, base)
    for key, err in result.get("failed_runs", {}).items():
        lines.append(f"\n**llama.cpp run {key} failed**: {err.strip().splitlines()[-1] if err.strip() else '?'}")
    if result.get("same_prompts") is False:
        lines.append("\n**warning: treespec and llama.cpp ran different prompts**")
    bench = result.get("llama_bench")
    if bench:
        lines += ["", f"`{bench['command']}`", "", "| model | test | tok/s | stddev |", "|---|---|---|---|"]
        lines += [f"| {r.get('model_type', r.get('model_filename'))} | {r['test']} | {r['avg_ts']:.2f} | "
                  f"{r.get('stddev_ts', 0.0):.2f} |" for r in bench["rows"]]
    return "\n".join(lines)
