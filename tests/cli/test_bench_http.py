"""``treespec bench --url``: concurrency rows measured over HTTP against a tiny deployment."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.cluster import free_port
from tests.integration.deployment import Deployment
from treespec.bench_http import Stream, concurrency, event_tokens, level_row, percentile_ms, request_body, run_order
from treespec.bench_data import Prompt
from common.host import cpu_model

pytestmark = pytest.mark.timeout(300)
MAX_NEW = 6
LEVELS = [1, 2, 4, 8]
# Runs the CLI, then fails if the HTTP bench pulled in torch (no model may be loaded).
NO_TORCH = "import sys; from treespec.cli import main; rc = main(sys.argv[1:]); " \
           "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    dep = Deployment.start(tmp_path_factory.mktemp("bench"), tree_size=4)
    try:
        yield dep.wait_ready()
    finally:
        dep.stop()


def bench(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NO_TORCH, "bench", *args], capture_output=True,
                          text=True, timeout=240)


class TestHelpers:
    def test_event_tokens_counts_logprob_entries(self):
        """Completions count logprobs.tokens, chat counts logprobs.content; usage events 0."""
        assert event_tokens({"choices": [{"logprobs": {"tokens": ["a", "b"]}}]}) == 2
        assert event_tokens({"choices": [{"logprobs": {"content": [{}, {}, {}]}}]}) == 3
        assert event_tokens({"choices": [], "usage": {"completion_tokens": 5}}) == 0

    def test_percentile_nearest_rank_in_ms(self):
        """p50 of 1..4 s is the third value (nearest rank), in ms; empty gives 0."""
        assert percentile_ms([0.004, 0.001, 0.003, 0.002], 0.5) == pytest.approx(3.0)
        assert percentile_ms([], 0.99) == 0.0

    def test_chat_prompts_use_the_chat_route(self):
        """A chat prompt goes to /v1/chat/completions with logprobs; greedy and streamed."""
        path, body = request_body(Prompt("0", "x", "hi", True), 5)
        assert path == "/v1/chat/completions" and body["logprobs"] is True
        assert body["temperature"] == 0.0 and body["stream"] and body["max_tokens"] == 5
        assert "speculation" not in body and request_body(Prompt("0", "x", "hi", True), 5, False)[1]["speculation"] is False

    def test_repeated_pairs_run_in_mirrored_order(self):
        """--repeat 3 with plain runs plain, spec, spec, plain, plain, spec at the first level (the mirror
        cancels a steady drift) and starts with spec at the next; without plain, spec only."""
        assert run_order(0, 3, True) == [False, True, True, False, False, True]
        assert run_order(1, 2, True) == [True, False, False, True]
        assert run_order(0, 2, False) == [True, True]

    def test_level_row_pools_runs_by_total_tokens_over_total_seconds(self):
        """Two runs of one mode (10 tokens in 1 s, 10 in 4 s) pool to 20 tokens / 5 s = 4 tok/s, not the
        mean of their rates (6.5); each run's own rate is kept."""
        run = lambda t0, secs: ([Stream(t0, t0 + 0.1, 10, [0.01] * 9)], secs)
        row = level_row([run(0.0, 1.0), run(5.0, 4.0)], True, 1)
        assert row["tokens"] == 20 and row["tokens_per_s"] == pytest.approx(4.0) and row["runs"] == 2
        assert row["runs_tokens_per_s"] == pytest.approx([10.0, 2.5]) and row["requests"] == 1
        assert row["ttft_p50_ms"] == pytest.approx(100.0) and row["mode"] == "http"

    def test_plain_baseline_warms_the_prefix_cache_first(self, monkeypatch):
        """With a plain baseline, every distinct prompt is sent once (1 token, speculation off) before
        any measured run, so neither mode's first run pays cold prefills; without one, nothing extra is sent."""
        import treespec.bench_http as bh
        calls = []

        async def fake_run_level(url, prompts, max_new, speculation=True, in_flight=None):
            calls.append(([p.id for p in prompts], max_new, speculation))
            return [Stream(0.0, 0.1, max_new, [0.01] * (max_new - 1))] * len(prompts), 1.0

        monkeypatch.setattr(bh, "run_level", fake_run_level)
        prompts = [Prompt("a", "x", "hi", False), Prompt("b", "x", "yo", False)]
        concurrency("http://127.0.0.1:1", prompts, 4, [1, 8], True)
        assert calls[0] == (["a", "b"], 1, False) and len(calls) == 1 + 2 * 2
        assert all(max_new == 4 for _, max_new, _ in calls[1:])
        calls.clear()
        concurrency("http://127.0.0.1:1", prompts, 4, [1], False)
        assert calls == [(["a", "b"], 4, True)]

    def test_repeat_below_one_is_refused(self):
        """repeat 0 is a ValueError before any request is sent."""
        with pytest.raises(ValueError, match="repeat"):
            concurrency("http://127.0.0.1:1", [Prompt("0", "x", "hi", False)], 4, [1], True, repeat=0)


class TestBenchUrl:
    def test_concurrency_rows_over_http(self, deployment, tmp_path):
        """--url --concurrency 1,2,4,8 writes http rows (tokens, TTFT, ITL) and plots, without torch;
        every level sends every prompt (at most N in flight)."""
        prompts = tmp_path / "prompts.txt"
        prompts.write_text("Say hello.\nCount to five.\n你好，世界 🌍\n")
        out = tmp_path / "http.json"
        done = bench(tmp_path, "--url", deployment.url, "--concurrency", ",".join(map(str, LEVELS)),
                     "--dataset", str(prompts), "--max-new-tokens", str(MAX_NEW), "--json", str(out),
                     "--plots", str(tmp_path / "plots"))
        assert done.returncode == 0, done.stderr
        result = json.loads(out.read_text())
        rows = result["concurrency"]
        assert result["config"]["cpu_model"] == cpu_model()  # every figure carries the host's CPU model
        assert [r["concurrency"] for r in rows] == LEVELS
        for r in rows:  # every one of the 3 prompts at each level; repeated to fill 4 and 8 in flight
            assert r["requests"] == max(3, r["concurrency"])
            assert r["mode"] == "http" and r["tokens"] == r["requests"] * MAX_NEW
            assert r["tokens_per_s"] > 0 and 0 < r["ttft_p50_ms"] and 0 < r["itl_p50_ms"] <= r["itl_p99_ms"]
        assert (tmp_path / "plots" / "throughput_vs_concurrency.png").exists()

    def test_baseline_plain_interleaves_plain_and_speculative_rows(self, deployment, tmp_path):
        """--baseline plain measures each level twice on one deployment, plain (requests with
        speculation off) and speculative, and gives the speculative row its speedup over plain."""
        prompts = tmp_path / "prompts.txt"
        prompts.write_text("Say hello.\nCount to five.\n")
        out = tmp_path / "ab.json"
        done = bench(tmp_path, "--url", deployment.url, "--concurrency", "1,2", "--baseline", "plain",
                     "--dataset", str(prompts), "--max-new-tokens", str(MAX_NEW), "--json", str(out))
        assert done.returncode == 0, done.stderr
        rows = json.loads(out.read_text())["concurrency"]
        assert [(r["mode"], r["concurrency"]) for r in rows] == [("http-plain", 1), ("http", 1), ("http-plain", 2), ("http", 2)]
        assert all(r["requests"] == 2 and r["tokens"] == 2 * MAX_NEW for r in rows)
        for plain, spec in (rows[0:2], rows[2:4]):
            assert spec["speedup_vs_plain"] == pytest.approx(spec["tokens_per_s"] / plain["tokens_per_s"])

    def test_repeat_pools_mirrored_runs_per_mode(self, deployment, tmp_path):
        """--repeat 2 --baseline plain runs each mode twice at a level and pools them: one row per mode
        with both runs' tokens and each run's rate."""
        prompts = tmp_path / "prompts.txt"
        prompts.write_text("Say hello.\n")
        out = tmp_path / "ab2.json"
        done = bench(tmp_path, "--url", deployment.url, "--concurrency", "1", "--baseline", "plain", "--repeat", "2",
                     "--dataset", str(prompts), "--max-new-tokens", str(MAX_NEW), "--json", str(out))
        assert done.returncode == 0, done.stderr
        result = json.loads(out.read_text())
        rows = result["concurrency"]
        assert result["config"]["repeat"] == 2 and [r["mode"] for r in rows] == ["http-plain", "http"]
        for r in rows:
            assert r["runs"] == 2 and r["tokens"] == 2 * MAX_NEW and len(r["runs_tokens_per_s"]) == 2
            assert r["tokens_per_s"] == pytest.approx(r["tokens"] / r["seconds"])

    def test_repeat_without_url_is_refused(self, tmp_path):
        """--repeat belongs to the HTTP bench: without --url it is a CLI error naming --url, exit 2."""
        done = bench(tmp_path, "--repeat", "2", "--json", str(tmp_path / "x.json"))
        assert done.returncode == 2 and "--repeat needs --url" in done.stderr

    def test_other_baselines_are_refused_with_url(self, tmp_path):
        """--url with an in-process baseline (hf-assisted) is a CLI error naming the option, exit 2."""
        prompts = tmp_path / "p.txt"
        prompts.write_text("hi\n")
        done = bench(tmp_path, "--url", "http://127.0.0.1:1", "--baseline", "hf-assisted", "--dataset", str(prompts),
                     "--json", str(tmp_path / "x.json"))
        assert done.returncode == 2 and "--baseline plain" in done.stderr

    def test_unreachable_url_exits_1(self, tmp_path):
        """Nothing listening at --url: a one-line error and exit status 1."""
        prompts = tmp_path / "p.txt"
        prompts.write_text("hi\n")
        done = bench(tmp_path, "--url", f"http://127.0.0.1:{free_port()}", "--dataset", str(prompts),
                     "--json", str(tmp_path / "x.json"))
        assert done.returncode == 1 and "treespec bench:" in done.stderr
        assert not (tmp_path / "x.json").exists()
