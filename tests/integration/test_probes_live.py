"""Probe ports of real scheduler, verifier and draft processes (tiny models): /livez,
/readyz, /metrics, replica labels defaulting to the hostname and kept unique."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.cluster import Cluster, free_port, wait_until, wait_workers

pytestmark = pytest.mark.timeout(300)


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError:
        return 0, ""


def gauge(port: int, name: str, **labels: str) -> float | None:
    for fam in text_string_to_metric_families(get(port, "/metrics")[1]):
        for s in fam.samples:
            if s.name == name and labels.items() <= s.labels.items():
                return s.value
    return None


class TestProbes:
    def test_every_service_serves_probes_and_metrics(self, tmp_path):
        """Scheduler, verifier and two drafts (no --replica) serve /livez, /readyz and /metrics on
        their metrics_port; replicas default to the hostname and stay unique in Stats; a killed
        verifier leaves the scheduler's worker gauge at 0 (the series stays)."""
        cluster = Cluster(f"tcp://127.0.0.1:{free_port()}", tmp_path, {})
        ports = {name: free_port() for name in ("scheduler", "verifier", "draft-a", "draft-b")}
        host = socket.gethostname()
        try:
            for name, port in ports.items():
                command = name.split("-")[0]
                out = open(tmp_path / f"{name}.log", "ab")
                cluster.procs[name] = subprocess.Popen(
                    [sys.executable, "-m", "treespec.cli", command], stdout=out, stderr=subprocess.STDOUT,
                    env={**cluster.env(), "TREESPEC_METRICS_PORT": str(port)}, start_new_session=True)
                out.close()
            client = cluster.client()
            stats = wait_workers(client, drafts=2, verifiers=1)
            labels = sorted((w.role.value, w.replica) for w in stats.workers)
            assert labels[2] == ("verifier", host)
            assert labels[0][1] != labels[1][1] and all(r.startswith(host + "-") for _, r in labels[:2])
            for name, port in ports.items():
                assert wait_until(lambda: get(port, "/readyz")[0] == 200, 30), name
                assert get(port, "/livez")[0] == 200, name
            assert gauge(ports["verifier"], "treespec:worker_ready", service="verifier", replica=host) == 1
            assert gauge(ports["draft-a"], "treespec:worker_kv_slots_capacity", service="draft") > 0
            assert gauge(ports["scheduler"], "treespec:scheduler_workers", service="draft") == 2
            assert gauge(ports["scheduler"], "treespec:scheduler_ready", replica=host) == 1
            cluster.kill("verifier", signal.SIGKILL)
            assert wait_until(lambda: gauge(ports["scheduler"], "treespec:scheduler_workers",
                                            service="verifier") == 0, 20)
            assert gauge(ports["scheduler"], "treespec:scheduler_ready") == 0
            assert get(ports["scheduler"], "/livez")[0] == 200
            client.close()
        finally:
            cluster.stop()
        assert all(p.returncode is not None for p in cluster.procs.values())
