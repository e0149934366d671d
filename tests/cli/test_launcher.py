"""``treespec up``: start, readiness, failure at start and shutdown without orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import psutil

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
        """`up` reports ready, writes one log per service, and SIGTERM stops every child."""
        proc, addr = _up(tmp_path)
        client = SchedulerClient(addr, name="launcher-test")
        client.wait_ready(120)
        client.close()
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 3
        assert {p.name for p in tmp_path.glob("*.log")} >= {"scheduler-0.log", "draft-0.log", "verifier-0.log"}
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        time.sleep(0.5)
        assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
