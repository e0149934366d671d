"""services.probes: the probe/metrics HTTP server, worker and scheduler instruments, and
the default replica label."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from services.gateway.metric_names import PROBE_METRIC_LABELS, series_names
from services.probes import ProbeServer, SchedulerCollector, WorkerMetrics, default_replica, new_registry


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


class TestDefaultReplica:
    def test_hostname_unless_given(self):
        """The replica label is --replica when given, else the hostname (container / pod name)."""
        assert default_replica("draft-7") == "draft-7"
        assert default_replica("") == default_replica(None) == socket.gethostname()


class TestProbeServer:
    def test_probes_follow_callables(self):
        """/livez and /readyz answer 200 or 503 as their callables say; unknown paths 404."""
        state = {"live": True, "ready": False}
        server = ProbeServer("127.0.0.1", 0, new_registry(), ready=lambda: state["ready"],
                             live=lambda: state["live"]).start()
        try:
            assert get(server.port, "/livez")[0] == 200
            assert get(server.port, "/readyz")[0] == 503
            state.update(ready=True, live=False)
            assert get(server.port, "/readyz")[0] == 200
            assert get(server.port, "/livez")[0] == 503
            assert get(server.port, "/nope")[0] == 404
        finally:
            server.close()

    def test_worker_metrics_served(self):
        """A worker's /metrics has its steps, step time, readiness, KV slots and kernel choice, labelled
        with service and replica, plus process_* metrics, and only names treespec declares."""
        slots = {"used": 3}
        kernels = ([("int4", 8, "int4"), ("int4", 128, "onednn")], {"int4/8/int4": 12.5, "int4/8/dense": 30.0})
        metrics = WorkerMetrics("draft", "draft-a", lambda: (slots["used"], 8), lambda: True, lambda: kernels)
        metrics.observe_step(0.02, False)
        metrics.observe_step(0.5, True)
        server = ProbeServer("127.0.0.1", 0, metrics.registry, ready=lambda: True).start()
        try:
            status, text = get(server.port, "/metrics")
        finally:
            server.close()
        got = samples(text)
        lab = (("replica", "draft-a"), ("service", "draft"))
        assert status == 200
        assert got[("treespec:worker_steps_total", lab)] == 2
        assert got[("treespec:worker_step_failures_total", lab)] == 1
        assert got[("treespec:worker_step_seconds_count", lab)] == 2
        assert got[("treespec:worker_ready", lab)] == 1
        assert got[("treespec:worker_kv_slots_used", lab)] == 3
        assert got[("treespec:worker_kv_slots_capacity", lab)] == 8

        def kern(rows: str, kernel: str) -> tuple:
            return ("format", "int4"), ("kernel", kernel), *lab[:1], ("rows", rows), *lab[1:]
        assert got[("treespec:worker_kernel_info", kern("8", "int4"))] == 1
        assert got[("treespec:worker_kernel_info", kern("128", "onednn"))] == 1
        assert got[("treespec:worker_kernel_probe_ms", kern("8", "dense"))] == 30.0
        assert ("process_cpu_seconds_total", ()) in got
        assert {name for name, _ in got} <= series_names()

    def test_scheduler_collector(self):
        """The scheduler exports readiness, live workers per service (0 kept) and gateways."""
        registry = new_registry()
        registry.register(SchedulerCollector("sched-a", lambda: False, lambda: {"draft": 0, "verifier": 2},
                                             lambda: 1))
        server = ProbeServer("127.0.0.1", 0, registry, ready=lambda: True).start()
        try:
            got = samples(get(server.port, "/metrics")[1])
        finally:
            server.close()
        assert got[("treespec:scheduler_ready", (("replica", "sched-a"),))] == 0
        assert got[("treespec:scheduler_workers", (("service", "draft"),))] == 0
        assert got[("treespec:scheduler_workers", (("service", "verifier"),))] == 2
        assert got[("treespec:scheduler_gateways", ())] == 1
        assert {n for n, _ in got if n.startswith("treespec:")} <= set(PROBE_METRIC_LABELS)
