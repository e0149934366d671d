"""The side-by-side result (llama.cpp + treespec bench) and its Markdown table."""

from __future__ import annotations

import pytest

from treespec.bench_compare import attach_treespec, markdown


def llama_result(ids: list[str]) -> dict:
    agg = {"tokens_per_s": 10.0, "decode_tokens_per_s": 12.0, "prompt_tokens_per_s": 80.0}
    spec = dict(agg, tokens_per_s=8.0, acceptance_rate=0.5, mean_accepted_length=1.8, n_draft=3)
    records = [{"id": i} for i in ids]
    return {"config": {"dataset": "humaneval", "prompts": len(ids), "max_new_tokens": 32, "threads": 2,
                       "cpu_model": "Test CPU", "llama_cpp": {"build_number": 1, "commit": "0c1e570"}},
            "runs": {"plain-q4": {"records": records, "aggregate": agg},
                     "spec-q4": {"records": records, "aggregate": spec}},
            "llama_bench": {"command": "llama-bench -p 256 -n 128 -t 2",
                            "rows": [{"model_type": "qwen2 1.5B Q4_K - Medium", "test": "tg128", "avg_ts": 14.0,
                                      "stddev_ts": 0.1}]}}


def treespec_bench(ids: list[str]) -> dict:
    recs = [{"id": i, "prompt_tokens": 100, "plain": {"ttft": 2.0}, "spec": {"ttft": 4.0}} for i in ids]
    return {"command": "treespec bench", "records": recs,
            "config": {"dtype": "bfloat16", "draft_quantization": "int4", "tree_size": "auto"},
            "aggregate": {"plain_tokens_per_s": 5.0, "spec_tokens_per_s": 15.0, "plain_decode_tokens_per_s": 5.5,
                          "spec_decode_tokens_per_s": 17.0, "mean_accepted_length": 4.0,
                          "draft_tokens_accepted_fraction": 0.6}}


class TestAttach:
    def test_prompt_rate_is_prompt_tokens_over_ttft(self):
        """treespec's prompt tok/s = prompt tokens / time to first token, per mode."""
        r = attach_treespec(llama_result(["a", "b"]), treespec_bench(["a", "b"]))
        assert r["treespec"]["plain"]["prompt_tokens_per_s"] == pytest.approx(50.0)
        assert r["treespec"]["spec"]["prompt_tokens_per_s"] == pytest.approx(25.0)
        assert r["same_prompts"] is True

    def test_different_prompts_are_flagged(self):
        """Runs over different prompt ids are marked and the table warns."""
        r = attach_treespec(llama_result(["a", "b"]), treespec_bench(["a", "c"]))
        assert r["same_prompts"] is False
        assert "different prompts" in markdown(r)


class TestMarkdown:
    def test_rows_and_ratios(self):
        """Each engine gets a row; ratios divide end-to-end tok/s by treespec plain and llama.cpp 4-bit plain."""
        table = markdown(attach_treespec(llama_result(["a"]), treespec_bench(["a"])))
        assert "CPU: Test CPU" in table
        spec_row = next(line for line in table.splitlines() if "| tree (" in line)
        assert spec_row.endswith("| 4.00 / 0.60 | 3.00x | 1.50x |")
        assert "| llama.cpp | 4-bit file + 0.5B draft | speculative (draft max 3) | 8.00 |" in table
        assert "| qwen2 1.5B Q4_K - Medium | tg128 | 14.00 | 0.10 |" in table

    def test_without_treespec_the_ratio_column_is_empty(self):
        """A llama.cpp-only result prints '-' where treespec's figure would divide."""
        table = markdown(llama_result(["a"]))
        row = next(line for line in table.splitlines() if "| 4-bit file | plain |" in line)
        assert row.endswith("| - | - | 1.00x |")

    def test_quantized_main_run_gets_its_own_rows(self):
        """A second treespec run with an int4 main model is labelled by its quantization and its ratios
        divide by the bf16 plain run (the first one attached) and llama.cpp's 4-bit plain."""
        r = attach_treespec(llama_result(["a"]), treespec_bench(["a"]))
        q = treespec_bench(["a"])
        q["config"]["main_quantization"] = "int4"
        q["aggregate"]["spec_tokens_per_s"] = 20.0
        table = markdown(attach_treespec(r, q, "treespec_int4"))
        row = next(line for line in table.splitlines() if "int4 main + 0.5B draft" in line)
        assert row.startswith("| treespec | bfloat16 act., int4 main + 0.5B draft (int4) | tree (auto) | 20.00 |")
        assert row.endswith("| 4.00x | 2.00x |")
        assert r["same_prompts"] is True
