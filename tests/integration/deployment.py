"""A real ``treespec up`` deployment (tiny models) on loopback, for HTTP-level tests.

``Deployment.start`` launches the launcher in its own process group with a free HTTP port
and scheduler port, its own log dir and no config file, and records every /health status
seen from the moment the process starts (0 = connection refused) until the first 200.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.cluster import free_port

READY_TIMEOUT_S = 120.0
HEALTH_POLL_S = 0.1
STOP_TIMEOUT_S = 20.0
SETTINGS = {"max_model_len": "256", "max_running": "8", "draft_vocab_size": "0",
            "heartbeat_interval_s": "0.25", "heartbeat_timeout_s": "3"}


def http_status(url: str, timeout_s: float = 2.0) -> tuple[int, dict[str, str]]:
    """(status, headers) of a GET; status 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status, dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers)
    except (urllib.error.URLError, OSError):
        return 0, {}


@dataclass
class Deployment:
    """One ``treespec up`` process group; ``health_log`` is [(status, headers), ...]."""

    proc: subprocess.Popen
    port: int
    scheduler_address: str
    log_dir: Path
    health_log: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    _poller: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, tmp: Path, tree_size: int, draft: str = "tiny-random:0", **settings: str) -> "Deployment":
        """Launch ``treespec up`` (not yet ready: call :meth:`wait_ready`)."""
        port, sched = free_port(), f"tcp://127.0.0.1:{free_port()}"
        log_dir = tmp / "logs"
        argv = [sys.executable, "-m", "treespec.cli", "up", "--model-path", "tiny-random:0",
                "--draft-model-path", draft, "--dtype", "float32", "--tree-size", str(tree_size),
                "--port", str(port), "--scheduler-address", sched, "--set", f"log_dir={log_dir}"]
        for key, value in {**SETTINGS, **settings}.items():
            argv += ["--set", f"{key}={value}"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("TREESPEC_")}
        out = open(tmp / "up.out", "ab")
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp,
                                start_new_session=True)
        out.close()
        dep = cls(proc, port, sched, log_dir)
        dep._poller = threading.Thread(target=dep._poll_health, daemon=True)
        dep._poller.start()
        return dep

    def _poll_health(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            status, headers = http_status(self.url + "/health")
            self.health_log.append((status, headers))
            if status == 200:
                return
            time.sleep(HEALTH_POLL_S)

    def wait_ready(self) -> "Deployment":
        """Block until /health answered 200; raise with the launcher output if it did not."""
        self._poller.join(READY_TIMEOUT_S)
        if not self.health_log or self.health_log[-1][0] != 200:
            self.stop()
            out = (self.log_dir.parent / "up.out").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"deployment on port {self.port} not ready: {out}")
        return self

    def stop(self) -> None:
        """SIGTERM the launcher's group (it stops every service); SIGKILL if it lingers."""
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(STOP_TIMEOUT_S)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def start_gateway(tmp: Path, scheduler_address: str, **settings: str) -> tuple[subprocess.Popen, int]:
    """A second ``treespec gateway`` for the same scheduler, configured by TREESPEC_* variables."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TREESPEC_")}
    cfg = {"main_model_path": "tiny-random:0", "port": str(port), "log_dir": str(tmp),
           **{k: v for k, v in SETTINGS.items() if k.startswith("heartbeat")}, "max_model_len": "256", **settings}
    env.update({f"TREESPEC_{k.upper()}": v for k, v in cfg.items()}, PYTHONUNBUFFERED="1")
    out = open(tmp / f"gateway-{port}.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "treespec.cli", "gateway", "--scheduler-address",
                             scheduler_address], stdout=out, stderr=subprocess.STDOUT, env=env,
                            cwd=tmp, start_new_session=True)
    out.close()
    return proc, port


def stop_process(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(STOP_TIMEOUT_S)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
