"""Parse the console output of llama.cpp's CLI tools into numbers (``benchmarks/llamacpp.sh`` builds them).

Pure functions over text; ``treespec.bench_llamacpp`` runs the tools. Formats parsed (llama.cpp as vendored
by llama-cpp-python 0.3.36; ``tests/data/llamacpp/`` holds captured output):

- ``llama-completion`` perf lines (``common_perf_print``): prompt eval / eval time, sampled tokens;
- ``llama-speculative-simple`` / ``llama-speculative`` summary: encoded / decoded tokens, n_drafted, n_accept;
- ``llama-bench -o json``: one object per test (``n_prompt``/``n_gen``, ``avg_ts``, ``cpu_info``, ...);
- ``--version``: ``version: <v> (build <n>, commit <sha>)`` (``-dirty``: the sdist is not a clean checkout).

Every parser raises :class:`LlamaCppOutputError` naming the missing line, never returns partial numbers.
"""

from __future__ import annotations

import json
import re

_NUM = r"([0-9]+(?:\.[0-9]+)?)"
PROMPT_EVAL = re.compile(rf"prompt eval time =\s*{_NUM} ms /\s*(\d+) tokens")
EVAL = re.compile(rf"(?<!prompt )\beval time =\s*{_NUM} ms /\s*(\d+) runs")
SAMPLING = re.compile(rf"sampling time =\s*{_NUM} ms")
SAMPLED = re.compile(rf"samplers time =\s*{_NUM} ms /\s*(\d+) (?:tokens|runs)")
ENCODED = re.compile(rf"encoded\s+(\d+) tokens in\s+{_NUM} seconds")
DECODED = re.compile(rf"decoded\s+(\d+) tokens in\s+{_NUM} seconds")
COUNTER = re.compile(r"\b(n_draft|n_predict|n_drafted|n_accept)\s*=\s*(\d+)")
VERSION = re.compile(r"version: (\S+) \(build (\d+), commit ([0-9a-f]+(?:-dirty)?)\)")
BENCH_FIELDS = ("model_filename", "model_type", "model_size", "model_n_params", "n_threads", "n_prompt", "n_gen",
                "avg_ts", "stddev_ts", "avg_ns", "build_commit", "build_number", "cpu_info", "backends")


class LlamaCppOutputError(ValueError):
    """A llama.cpp tool's output lacks a line the benchmark needs (the tool failed or its format changed)."""


def _need(pattern: re.Pattern, text: str, what: str) -> re.Match:
    """The first match of ``pattern``; LlamaCppOutputError naming ``what`` when absent."""
    found = pattern.search(text)
    if found is None:
        raise LlamaCppOutputError(f"no {what!r} line in llama.cpp output (last lines: {text[-300:]!r})")
    return found


def parse_completion(text: str) -> dict:
    """``llama-completion`` (or ``llama-cli``) perf summary of one greedy generation.

    Returns prompt_tokens, prompt_ms, eval_runs (one-token decode passes), eval_ms, sampling_ms and
    generated_tokens = eval_runs + 1 (the first token comes from the prompt pass; an end-of-text token
    counts). The ``samplers time`` line's token count is prompt + generated tokens (captured output:
    118-token prompt, 20 eval runs, "/ 139 tokens"), so it is required but not used as the count.
    Times in milliseconds. Raises LlamaCppOutputError.
    """
    prompt, evals = _need(PROMPT_EVAL, text, "prompt eval time"), _need(EVAL, text, "eval time")
    sampled = _need(SAMPLED, text, "samplers time")
    sampling = SAMPLING.search(text)
    return {"prompt_tokens": int(prompt[2]), "prompt_ms": float(prompt[1]),
            "eval_runs": int(evals[2]), "eval_ms": float(evals[1]), "generated_tokens": int(evals[2]) + 1,
            "sampling_ms": float(sampling[1]) if sampling else float(sampled[1])}


def parse_speculative(text: str) -> dict:
    """``llama-speculative-simple`` / ``llama-speculative`` summary of one greedy speculative generation.

    Returns prompt_tokens, encode_s (prompt pass of main and draft), generated_tokens, decode_s, n_draft
    (draft length limit), n_drafted, n_accept, acceptance_rate (n_accept / n_drafted) and
    mean_accepted_length: tokens per main-model verification pass, bonus included. Every pass commits its
    accepted drafts + 1 token, so passes = generated - n_accept and MAL = generated / passes.
    Raises LlamaCppOutputError.
    """
    enc, dec = _need(ENCODED, text, "encoded ... tokens"), _need(DECODED, text, "decoded ... tokens")
    counters = dict((k, int(v)) for k, v in COUNTER.findall(text))
    missing = [k for k in ("n_draft", "n_drafted", "n_accept") if k not in counters]
    if missing:
        raise LlamaCppOutputError(f"no {missing[0]!r} line in llama.cpp speculative output")
    generated, accepted = int(dec[1]), counters["n_accept"]
    passes = generated - accepted
    return {"prompt_tokens": int(enc[1]), "encode_s": float(enc[2]), "generated_tokens": generated,
            "decode_s": float(dec[2]), "n_draft": counters["n_draft"], "n_drafted": counters["n_drafted"],
            "n_accept": accepted, "acceptance_rate": accepted / counters["n_drafted"] if counters["n_drafted"] else 0.0,
            "mean_accepted_length": generated / passes if passes > 0 else 0.0}


def parse_bench_json(text: str) -> list[dict]:
    """``llama-bench -o json`` rows, each cut to BENCH_FIELDS plus ``test`` (``pp256`` / ``tg128``).

    ``avg_ts``: tokens/s averaged over the repetitions. Raises LlamaCppOutputError on non-JSON output
    or a row without ``avg_ts``.
    """
    start = text.find("[")
    try:
        rows = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError as exc:
        raise LlamaCppOutputError(f"llama-bench output is not JSON: {exc}") from exc
    if not isinstance(rows, list) or not rows:
        raise LlamaCppOutputError("llama-bench printed no JSON rows")
    out = []
    for row in rows:
        if "avg_ts" not in row:
            raise LlamaCppOutputError(f"llama-bench row without avg_ts: {row!r}")
        kept = {k: row[k] for k in BENCH_FIELDS if k in row}
        kept["test"] = f"pp{row['n_prompt']}" if row.get("n_gen", 0) == 0 else f"tg{row['n_gen']}"
        out.append(kept)
    return out


def parse_version(text: str) -> dict:
    """``{"version", "build_number", "commit"}`` from a tool's ``--version`` output. Raises LlamaCppOutputError."""
    found = _need(VERSION, text, "version:")
    return {"version": found[1], "build_number": int(found[2]), "commit": found[3]}
