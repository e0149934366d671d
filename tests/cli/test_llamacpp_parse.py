"""Parsers of llama.cpp's console output, on output captured from the tools that benchmarks/llamacpp.sh
builds (tests/data/llamacpp/; nothing here builds or runs llama.cpp)."""

from __future__ import annotations

from pathlib import Path

import pytest

from treespec.llamacpp_parse import (LlamaCppOutputError, parse_bench_json, parse_completion,
                                     parse_speculative, parse_version)

DATA = Path(__file__).resolve().parents[1] / "data" / "llamacpp"


def captured(name: str) -> str:
    return (DATA / name).read_text()


class TestParseCompletion:
    def test_reads_the_perf_lines(self):
        """llama-completion's perf summary gives prompt tokens/time, decode runs/time and sampled tokens."""
        r = parse_completion(captured("completion.txt"))
        assert r["prompt_tokens"] == 118
        assert r["generated_tokens"] == r["eval_runs"] + 1 == 32
        assert r["prompt_ms"] > 0 and r["eval_ms"] > 0 and r["sampling_ms"] > 0

    def test_output_without_decode_line_is_refused(self):
        """Output whose one-token eval line is missing raises LlamaCppOutputError naming that line
        (the prompt eval line alone must not be read as the decode line)."""
        text = "\n".join(line for line in captured("completion.txt").splitlines()
                         if "eval time" not in line or "prompt eval" in line)
        with pytest.raises(LlamaCppOutputError, match="'eval time'"):
            parse_completion(text)

    def test_empty_output_is_refused(self):
        """A tool that printed nothing raises LlamaCppOutputError, not a zero figure."""
        with pytest.raises(LlamaCppOutputError, match="prompt eval time"):
            parse_completion("")


class TestParseSpeculative:
    def test_reads_the_summary(self):
        """llama-speculative-simple's summary gives encode/decode times and draft counters."""
        r = parse_speculative(captured("speculative_simple.txt"))
        assert r["prompt_tokens"] == 118
        assert r["encode_s"] > 0 and r["decode_s"] > 0
        assert 0 <= r["n_accept"] <= r["n_drafted"]
        assert r["acceptance_rate"] == pytest.approx(r["n_accept"] / r["n_drafted"])

    def test_mean_accepted_length_counts_the_bonus_token(self):
        """MAL = generated / (generated - accepted): each verification pass commits accepted + 1 tokens."""
        text = ("encoded  100 tokens in    1.000 seconds, speed: 100.000 t/s\n"
                "decoded   30 tokens in    2.000 seconds, speed:  15.000 t/s\n"
                "n_draft   = 3\nn_predict = 30\nn_drafted = 24\nn_accept  = 20\naccept    = 83.333%\n")
        r = parse_speculative(text)
        assert r["mean_accepted_length"] == pytest.approx(30 / 10)
        assert (r["generated_tokens"], r["n_draft"], r["decode_s"]) == (30, 3, 2.0)

    def test_missing_counter_is_refused(self):
        """A summary without n_accept raises LlamaCppOutputError naming it."""
        text = captured("speculative_simple.txt").replace("n_accept", "n_xxxxxx")
        with pytest.raises(LlamaCppOutputError, match="n_accept"):
            parse_speculative(text)


class TestParseBenchJson:
    def test_rows_are_prompt_and_generation_tests(self):
        """llama-bench -o json rows become pp/tg tests with tokens/s and the build commit."""
        rows = parse_bench_json(captured("bench.json"))
        assert [r["test"] for r in rows] == ["pp16", "tg8"]
        assert all(r["avg_ts"] > 0 and r["n_threads"] == 2 and r["build_commit"] for r in rows)

    def test_non_json_is_refused(self):
        """Text that is not llama-bench JSON raises LlamaCppOutputError."""
        with pytest.raises(LlamaCppOutputError):
            parse_bench_json("main: error: failed to load model\n[ broken")

    def test_row_without_throughput_is_refused(self):
        """A JSON row without avg_ts raises LlamaCppOutputError rather than reporting 0 tok/s."""
        with pytest.raises(LlamaCppOutputError, match="avg_ts"):
            parse_bench_json('[{"n_prompt": 16, "n_gen": 0}]')


class TestParseVersion:
    def test_version_line(self):
        """--version output gives the build number and the vendored commit (dirty: an sdist, not a checkout)."""
        v = parse_version(captured("version.txt"))
        assert v["commit"].startswith("0c1e570") and v["build_number"] >= 1 and v["version"]

    def test_run_output_is_not_a_version(self):
        """A generation log has no version line: LlamaCppOutputError, not an empty commit."""
        with pytest.raises(LlamaCppOutputError, match="version"):
            parse_version(captured("completion.txt"))
