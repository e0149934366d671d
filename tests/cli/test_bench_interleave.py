"""``treespec bench --url --baseline in-process``: one HTTP stream against the same speculation in
this process, prompt by prompt, against a tiny deployment."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.cluster import free_port
from tests.integration.deployment import Deployment
from treespec.bench_interleave import HTTP, LOCAL, pair_order, summarize

pytestmark = pytest.mark.timeout(300)
MAX_NEW = 6
MODELS = ["--model-path", "tiny-random:0", "--draft-model-path", "tiny-random:0", "--dtype", "float32",
          "--tree-size", "4"]


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "treespec.cli", "bench", *args], capture_output=True, text=True,
                          timeout=240)


def pair(http_tps: float, local_tps: float, tokens: int = 10) -> dict:
    return {HTTP: {"tokens": tokens, "seconds": tokens / http_tps, "ttft_s": 0.1, "itl_s": [0.05]},
            LOCAL: {"tokens": tokens, "seconds": tokens / local_tps, "ttft_s": 0.2, "itl_s": [0.04]},
            "identical_text": True}


class TestHelpers:
    def test_pairs_alternate_which_arm_goes_first(self):
        """Consecutive pairs run the arms in mirrored order, so a steady drift slows both alike."""
        assert [pair_order(i) for i in range(3)] == [[HTTP, LOCAL], [LOCAL, HTTP], [HTTP, LOCAL]]

    def test_summary_pools_tokens_and_takes_the_median_pair_ratio(self):
        """The pooled ratio is total tokens over total seconds per arm; the median is over per-pair ratios."""
        got = summarize([pair(9.0, 10.0), pair(10.0, 10.0), pair(4.0, 8.0)])
        assert got["per_pair_ratios"] == pytest.approx([0.9, 1.0, 0.5])
        assert got["ratio_median_of_pairs"] == pytest.approx(0.9)
        http_tps, local_tps = 30 / (10 / 9 + 1 + 2.5), 30 / (1 + 1 + 1.25)
        assert got["ratio_http_vs_local"] == pytest.approx(http_tps / local_tps)
        assert got["http"]["ttft_p50_ms"] == pytest.approx(100) and got["local"]["itl_p50_ms"] == pytest.approx(40)
        assert got["identical_text"] == 3


class TestCli:
    def test_interleaves_http_and_local_runs_of_every_prompt(self, tmp_path):
        """Each prompt runs once per repeat over HTTP and once in process with the same models; the JSON
        holds both arms' pooled rows, one ratio per pair, and the same greedy text in both arms."""
        (tmp_path / "dep").mkdir()
        dep = Deployment.start(tmp_path / "dep", tree_size=4)
        try:
            dep.wait_ready()
            prompts = tmp_path / "prompts.txt"
            prompts.write_text("Say hello.\nCount to five.\n")
            out = tmp_path / "inter.json"
            done = bench("--url", dep.url, "--baseline", "in-process", "--repeat", "2", "--dataset", str(prompts),
                         "--max-new-tokens", str(MAX_NEW), "--json", str(out), *MODELS)
        finally:
            dep.stop()
        assert done.returncode == 0, done.stderr
        got = json.loads(out.read_text())["interleaved"]
        assert len(got["pairs"]) == 4 and len(got["per_pair_ratios"]) == 4
        assert got["http"]["tokens"] == got["local"]["tokens"] == 4 * MAX_NEW
        assert got["identical_text"] == 4
        assert got["ratio_http_vs_local"] == pytest.approx(got["http"]["tokens_per_s"] / got["local"]["tokens_per_s"])

    def test_in_process_baseline_refuses_several_streams(self, tmp_path):
        """The interleaved comparison is one stream: --concurrency above 1 is a CLI error, exit 2."""
        prompts = tmp_path / "p.txt"
        prompts.write_text("hi\n")
        done = bench("--url", "http://127.0.0.1:1", "--baseline", "in-process", "--concurrency", "1,8",
                     "--dataset", str(prompts), "--json", str(tmp_path / "x.json"), *MODELS)
        assert done.returncode == 2 and "one stream" in done.stderr
        assert not (tmp_path / "x.json").exists()

    def test_unreachable_url_fails_before_any_model_loads(self, tmp_path):
        """Nothing listening at --url: exit 1 with a one-line error, torch never imported, no JSON written."""
        prompts = tmp_path / "p.txt"
        prompts.write_text("hi\n")
        check = ("import sys; from treespec.cli import main; rc = main(sys.argv[1:]); "
                 "sys.exit(3 if 'torch' in sys.modules else rc)")  # 3: a model was loaded
        done = subprocess.run([sys.executable, "-c", check, "bench", "--url", f"http://127.0.0.1:{free_port()}",
                               "--baseline", "in-process", "--dataset", str(prompts), "--json",
                               str(tmp_path / "x.json"), *MODELS], capture_output=True, text=True, timeout=120)
        assert done.returncode == 1 and "treespec bench:" in done.stderr, done.stderr
        assert not (tmp_path / "x.json").exists()
