"""``treespec up``: start, readiness, failure at start and shutdown without orphans."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import psutil

from common.control_keys import default_keys_dir
from common.openmp_env import set_worker_wait_policy, wait_policy
from services.scheduler.client import SchedulerClient

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from cluster import free_port  # noqa: E402

pytestmark = pytest.mark.timeout(300)
TINY = ["--model-path", "tiny-random:0", "--draft-model-path", "tiny-random:1", "--dtype", "float32",
        "--tree-size", "4", "--set", "max_model_len=128", "--set", "heartbeat_interval_s=0.25"]


def _up(tmp_path, *extra: str) -> tuple[subprocess.Popen, str]:
    addr = f"tcp://127.0.0.1:{free_port()}"
    argv = [sys.executable, "-m", "treespec.cli", "up", "--scheduler-address", addr, "--port", str(free_port()),
            "--set", f"log_dir={tmp_path}", *TINY, *extra]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), addr


class TestLauncher:
    def test_bad_model_path_fails_fast_with_reason(self, tmp_path):
        """A service that cannot load its model makes `up` exit 1 naming the cause, within 60 s."""
        proc, _ = _up(tmp_path, "--model-path", "/nonexistent/model.gguf")
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 1
        assert "exited with status" in err and "/nonexistent/model.gguf" in err

    def test_ready_then_sigterm_leaves_no_orphans(self, tmp_path):
        """`up` reports ready, writes one log per service, and SIGTERM stops every child, each
        service logging that it stopped (the log shows a clean shutdown, not a crash) and `up` saying so last."""
        proc, addr = _up(tmp_path)
        client = SchedulerClient(addr, str(default_keys_dir()), name="launcher-test")  # `up`'s default keys
        client.wait_ready(120)
        client.close()
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 3
        assert {p.name for p in tmp_path.glob("*.log")} >= {"scheduler-0.log", "draft-0.log", "verifier-0.log"}
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        time.sleep(0.5)
        assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        assert "treespec up: ready" in out and out.rstrip().endswith("treespec up: stopped")
        for service, event in (("gateway", "gateway stopped"), ("scheduler", "scheduler stopped"),
                               ("draft", "worker stopped"), ("verifier", "worker stopped")):
            assert event in (tmp_path / f"{service}-0.log").read_text(), service

    def test_workers_run_with_the_worker_openmp_spin_count(self, tmp_path):
        """Draft and verifier started by `up` log the worker OpenMP wait policy (GOMP_SPINCOUNT
        30000 unless this environment chose one), set before their torch import."""
        expected = dict(os.environ)
        set_worker_wait_policy(expected)
        proc, addr = _up(tmp_path)
        client = SchedulerClient(addr, str(default_keys_dir()), name="launcher-test")
        client.wait_ready(120)
        client.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        for service in ("draft", "verifier"):
            events = [json.loads(ln) for ln in (tmp_path / f"{service}-0.log").read_text().splitlines()
                      if "openmp wait policy" in ln]
            assert [e["settings"] for e in events] == [wait_policy(expected)], service


def _sse_stream(url: str, body: dict):
    """POST a streaming completion; yields each decoded SSE data payload (a dict, or '[DONE]')."""
    import urllib.request
    req = urllib.request.Request(url + "/v1/completions", json.dumps({**body, "stream": True}).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if line.startswith("data: "):
                data = line[len("data: "):]
                yield data if data == "[DONE]" else json.loads(data)


def _service_pid(launcher_pid: int, command: str) -> int:
    """The pid of the launcher's child running ``treespec.cli <command>``."""
    for p in psutil.Process(launcher_pid).children(recursive=True):
        if command in p.cmdline()[3:5]:
            return p.pid
    raise LookupError(command)


class TestSupervision:
    def test_draft_killed_mid_completion_request_finishes(self, tmp_path):
        """kill -9 of the draft worker while a completion streams: the launcher restarts it and the
        stream still ends with all max_tokens, the same greedy text as before, and [DONE]."""
        from tests.integration.deployment import Deployment
        dep = Deployment.start(tmp_path, tree_size=4).wait_ready()
        try:
            body = {"prompt": "def f(x):", "max_tokens": 64, "temperature": 0.0, "ignore_eos": True}
            reference = "".join(e["choices"][0]["text"] for e in _sse_stream(dep.url, body) if e != "[DONE]")
            events, killed = [], None
            for ev in _sse_stream(dep.url, body):
                events.append(ev)
                if killed is None:
                    killed = _service_pid(dep.proc.pid, "draft")
                    os.kill(killed, signal.SIGKILL)
            assert events[-1] == "[DONE]"
            chunks = [e for e in events[:-1] if e["choices"]]
            assert chunks[-1]["choices"][0]["finish_reason"] == "length"
            assert "".join(c["choices"][0]["text"] for c in chunks) == reference
            assert psutil.pid_exists(killed) is False or psutil.Process(killed).status() == psutil.STATUS_ZOMBIE
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and "restarted draft-0" not in (tmp_path / "up.out").read_text():
                time.sleep(0.2)
            assert "restarted draft-0" in (tmp_path / "up.out").read_text()
            assert _service_pid(dep.proc.pid, "draft") != killed
        finally:
            dep.stop()
