"""The llama.cpp runner of the side-by-side benchmark, driven by stand-in binaries that print output captured
from the real tools (tests/data/llamacpp/); nothing here builds or runs llama.cpp."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from treespec import bench_llamacpp
from treespec.bench_data import Prompt
from treespec.bench_llamacpp import LlamaCppError, Tools, bench_rows, plain_runs, render_prompts, spec_runs

DATA = Path(__file__).resolve().parents[1] / "data" / "llamacpp"
TOOLS = {"llama-completion": "completion.txt", "llama-speculative-simple": "speculative_simple.txt",
         "llama-bench": "bench.json"}


def stand_in(bin_dir: Path, tool: str, body: str) -> None:
    path = bin_dir / tool
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def tools(tmp_path) -> Tools:
    """A bin dir whose tools print the captured output of the real ones."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, name in TOOLS.items():
        stand_in(bin_dir, tool, f"cat '{DATA / name}'")
    stand_in(bin_dir, "llama-completion", completion_body())
    return Tools(bin_dir, threads=2)


def completion_body() -> str:
    """llama-completion's stand-in: its --version output, else a generation's output."""
    return f"""case "$1" in --version) cat '{DATA / 'version.txt'}' >&2;; *) cat '{DATA / 'completion.txt'}';; esac"""


def prompt_rows(tmp_path: Path, n: int, tokens: int = 118) -> list[dict]:
    (tmp_path / "p.txt").write_text("def f():\n")
    return [{"id": f"HumanEval/{i}", "category": "humaneval", "path": str(tmp_path / "p.txt"), "tokens": tokens}
            for i in range(n)]


def one_prompt_run(tools: Tools, tmp_path: Path, monkeypatch) -> dict:
    """bench_llamacpp.main on one prompt with the stand-in tools and a fake tokenizer; asserts exit 0 and
    returns the written result JSON."""
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr("common.modeling.loader.load_weights_tokenizer_only", lambda *a, **k: FakeTokenizer())
    out = tmp_path / "o.json"
    rc = bench_llamacpp.main(["--bin", str(tools.bin_dir), "--model", str(gguf), "--draft", str(gguf),
                              "--bf16-model", str(gguf), "--limit", "1", "--bench-reps", "1", "--json", str(out)])
    assert rc == 0
    return json.loads(out.read_text())


class FakeTokenizer:
    """Chat template and token count of a whitespace tokenizer (the runner needs only these two calls)."""

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        return f"<|im_start|>user\n{messages[0]['content']}<|im_end|>\n<|im_start|>assistant\n"

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": list(range(len(text.split())))}


class TestRenderPrompts:
    def test_chat_prompts_get_the_template_and_code_prompts_do_not(self, tmp_path):
        """Chat prompts are written through the chat template, code prompts verbatim, with our token count."""
        rows = render_prompts([Prompt("a", "qa", "why is the sky blue", True),
                               Prompt("b", "humaneval", "def f(x):\n    \"\"\"\\n\"\"\"", False)],
                              FakeTokenizer(), tmp_path)
        chat, code = (Path(r["path"]).read_text() for r in rows)
        assert chat.startswith("<|im_start|>user\nwhy is the sky blue<|im_end|>")
        assert code == "def f(x):\n    \"\"\"\\n\"\"\""
        assert [r["tokens"] for r in rows] == [len(chat.split()), len(code.split())]


class TestPlainRuns:
    def test_aggregate_from_the_perf_lines(self, tools, tmp_path):
        """Two prompts: end-to-end tok/s = generated / (prompt + eval + sampling time), decode from eval runs."""
        out = plain_runs(tools, Path("m.gguf"), prompt_rows(tmp_path, 2), 32)
        r, agg = out["records"][0], out["aggregate"]
        assert r["prompt_tokens_match"] and "-t 2" in r["command"] and "--no-escape" in r["command"]
        assert agg["tokens_per_s"] == pytest.approx(
            2 * r["generated_tokens"] / (2 * (r["prompt_ms"] + r["eval_ms"] + r["sampling_ms"]) / 1e3))
        assert agg["decode_tokens_per_s"] == pytest.approx(r["eval_runs"] / r["eval_ms"] * 1e3)

    def test_prompt_token_mismatch_is_recorded(self, tools, tmp_path):
        """A tool that tokenized the prompt differently is flagged per record."""
        out = plain_runs(tools, Path("m.gguf"), prompt_rows(tmp_path, 1, tokens=117), 32)
        assert out["records"][0]["prompt_tokens_match"] is False

    def test_failing_tool_raises(self, tools, tmp_path):
        """A tool exiting non-zero raises LlamaCppError with its stderr."""
        stand_in(tools.bin_dir, "llama-completion", "echo 'failed to load model' >&2; exit 3")
        with pytest.raises(LlamaCppError, match="failed to load model"):
            plain_runs(tools, Path("m.gguf"), prompt_rows(tmp_path, 1), 32)

    def test_missing_tool_names_the_build_script(self, tmp_path):
        """An unbuilt tool raises LlamaCppError pointing at benchmarks/llamacpp.sh."""
        with pytest.raises(LlamaCppError, match="llamacpp.sh"):
            plain_runs(Tools(tmp_path), Path("m.gguf"), prompt_rows(tmp_path, 1), 32)


class TestSpecAndBench:
    def test_spec_aggregate(self, tools, tmp_path):
        """Speculative rows: tok/s over encode + decode time, acceptance and MAL over all prompts."""
        out = spec_runs(tools, Path("m.gguf"), Path("d.gguf"), prompt_rows(tmp_path, 2), 32, draft_max=5)
        r, agg = out["records"][0], out["aggregate"]
        assert "--spec-draft-n-max 5" in r["command"] and "-md d.gguf" in r["command"]
        assert agg["tokens_per_s"] == pytest.approx(r["generated_tokens"] / (r["encode_s"] + r["decode_s"]))
        assert agg["acceptance_rate"] == pytest.approx(r["acceptance_rate"])
        assert agg["mean_accepted_length"] == pytest.approx(r["mean_accepted_length"])

    def test_bench_rows_keep_the_command(self, tools):
        """llama-bench rows come with the exact command that produced them."""
        out = bench_rows(tools, [Path("a.gguf"), Path("b.gguf")], 16, 8, 1)
        assert out["command"].endswith("-m a.gguf -m b.gguf -p 16 -n 8 -r 1 -o json -t 2")
        assert len(out["rows"]) == 2


class TestMain:
    def test_missing_bf16_file_is_a_usage_error(self, tmp_path, capsys):
        """A BF16 GGUF that was not made exits 2 naming the file and the script that makes it."""
        main_gguf = tmp_path / "m.gguf"
        main_gguf.write_bytes(b"GGUF")
        rc = bench_llamacpp.main(["--bin", str(tmp_path), "--model", str(main_gguf), "--draft", str(main_gguf),
                                  "--bf16-model", str(tmp_path / "none.gguf"), "--json", str(tmp_path / "o.json")])
        assert rc == 2
        err = capsys.readouterr().err
        assert "none.gguf" in err and "llamacpp.sh" in err
        assert not (tmp_path / "o.json").exists()

    def test_unknown_skip_is_a_usage_error(self, tools, tmp_path, capsys, monkeypatch):
        """--skip with a run name that does not exist exits 2 naming it, before any tool run."""
        gguf = tmp_path / "m.gguf"
        gguf.write_bytes(b"GGUF")
        monkeypatch.setattr("common.modeling.loader.load_weights_tokenizer_only", lambda *a, **k: FakeTokenizer())
        rc = bench_llamacpp.main(["--bin", str(tools.bin_dir), "--model", str(gguf), "--draft", str(gguf),
                                  "--bf16-model", str(gguf), "--skip", "plain-q5", "--json", str(tmp_path / "o.json")])
        assert rc == 2
        assert "plain-q5" in capsys.readouterr().err

    def test_json_is_written_with_the_table(self, tools, tmp_path, capsys, monkeypatch):
        """A full run (stand-in tools, fake tokenizer) writes the result JSON and prints the table."""
        result = one_prompt_run(tools, tmp_path, monkeypatch)
        assert set(result["runs"]) == {"plain-q4", "plain-bf16", "spec-q4", "spec-bf16"}
        assert result["config"]["llama_cpp"]["commit"].startswith("0c1e570")
        assert "not built by benchmarks/llamacpp.sh" in result["config"]["llama_cpp"]["source"]
        assert "| llama.cpp | 4-bit file | plain |" in capsys.readouterr().out
        assert "--limit 1" in result["command"]

    def test_a_failing_tool_costs_its_row_not_the_run(self, tools, tmp_path, capsys, monkeypatch):
        """When llama-speculative-simple exits non-zero the plain rows and llama-bench are still written,
        the speculative rows are listed under failed_runs with the tool's message, and the table says so."""
        stand_in(tools.bin_dir, "llama-speculative-simple",
                 "echo 'E failed to initialize speculative decoding' >&2; exit 1")
        result = one_prompt_run(tools, tmp_path, monkeypatch)
        assert set(result["runs"]) == {"plain-q4", "plain-bf16"}
        assert set(result["failed_runs"]) == {"spec-q4", "spec-bf16"}
        assert "failed to initialize speculative decoding" in result["failed_runs"]["spec-q4"]
        assert result["llama_bench"]["rows"]
        assert "llama.cpp run spec-q4 failed" in capsys.readouterr().out
