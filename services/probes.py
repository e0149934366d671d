"""Probes and Prometheus metrics of the scheduler, draft and verifier, on a small HTTP port.

``ProbeServer`` serves, from a daemon thread (stdlib ``http.server``, one thread per
request), ``GET /metrics`` (the process's own CollectorRegistry, text format 0.0.4),
``GET /livez`` (200 while the process's main loop is alive) and ``GET /readyz`` (200
when the service can do its work, else 503). The port is config ``metrics_port``
(0 = no server, e.g. in-process tests); it listens on config ``host``. Torch-free.

The gateway serves the same probes on its own HTTP port (services/gateway/app.py).
Metric names are listed in ``services.gateway.metric_names.PROBE_METRIC_LABELS``.
"""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterator

from prometheus_client import (CollectorRegistry, Counter, Histogram, ProcessCollector,
                               disable_created_metrics, generate_latest)
from prometheus_client.core import GaugeMetricFamily, Metric

from services.gateway.metric_names import PREFIX

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def default_replica(explicit: str | None = None) -> str:
    """The replica label: ``explicit`` (``--replica``) when given, else this host's name.

    In a container the hostname is the container id (compose) or the pod name
    (Kubernetes), so every replica is labelled differently in /metrics, /health and logs.
    """
    return explicit or socket.gethostname()


class ProbeServer:
    """``/metrics``, ``/livez`` and ``/readyz`` on ``host:port`` (port 0 with ``start`` is
    not used: callers skip the server when ``metrics_port`` is 0).

    ``live`` / ``ready``: called per request, True -> 200, False -> 503. Raises OSError
    from ``start`` when the port cannot be bound.
    """

    def __init__(self, host: str, port: int, registry: CollectorRegistry,
                 ready: Callable[[], bool], live: Callable[[], bool] = lambda: True) -> None:
        self.host, self.port, self.registry = host, port, registry
        self.ready, self.live = ready, live
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> "ProbeServer":
        """Bind and serve in a daemon thread; ``self.port`` is the bound port afterwards."""
        server = ThreadingHTTPServer((self.host, self.port), self._handler())
        server.daemon_threads = True
        self._server, self.port = server, server.server_address[1]
        threading.Thread(target=server.serve_forever, name="probe-server", daemon=True).start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        probes = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._reply(200, generate_latest(probes.registry), CONTENT_TYPE)
                elif path in ("/livez", "/readyz"):
                    ok = (probes.live if path == "/livez" else probes.ready)()
                    self._reply(200 if ok else 503, b"ok\n" if ok else b"not ready\n", "text/plain")
                else:
                    self._reply(404, b"not found\n", "text/plain")

            def _reply(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:  # probes every few seconds: no access log
                pass

        return Handler


def new_registry() -> CollectorRegistry:
    """A registry with the standard ``process_*`` metrics (CPU seconds, resident memory)."""
    disable_created_metrics()
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    return registry


class WorkerMetrics:
    """A draft or verifier worker's own instruments (labels ``service``, ``replica``).

    ``observe_step(seconds, failed)`` is called once per step; ``slots`` returns
    (KV slots in use, KV slots in the pool), read at scrape time; ``kernels`` returns the
    model's kernel choice: (``(format, rows, kernel)`` chosen, ``{"format/rows/kernel": ms}``
    timed), empty while loading or with the probe off.
    """

    def __init__(self, service: str, replica: str, slots: Callable[[], tuple[int, int]],
                 ready: Callable[[], bool],
                 kernels: Callable[[], tuple[list[tuple[str, int, str]], dict[str, float]]] = lambda: ([], {})) -> None:
        self.registry = new_registry()
        labels = {"service": service, "replica": replica}
        self.steps = Counter(PREFIX + "worker_steps", "Draft or verify steps run",
                             list(labels), registry=self.registry).labels(**labels)
        self.failures = Counter(PREFIX + "worker_step_failures", "Steps that failed (sequences reported lost)",
                                list(labels), registry=self.registry).labels(**labels)
        self.step_seconds = Histogram(PREFIX + "worker_step_seconds", "Time of one draft or verify step",
                                      list(labels), buckets=STEP_BUCKETS, registry=self.registry).labels(**labels)
        self.registry.register(_WorkerGauges(labels, slots, ready))
        self.registry.register(_KernelGauges(labels, kernels))

    def observe_step(self, seconds: float, failed: bool) -> None:
        self.steps.inc()
        self.step_seconds.observe(seconds)
        if failed:
            self.failures.inc()


class _WorkerGauges:
    def __init__(self, labels: dict[str, str], slots: Callable[[], tuple[int, int]],
                 ready: Callable[[], bool]) -> None:
        self._labels, self._slots, self._ready = labels, slots, ready

    def collect(self) -> Iterator[Metric]:
        names, values = list(self._labels), list(self._labels.values())
        used, capacity = self._slots()
        for name, value, doc in (("worker_ready", int(self._ready()), "1 once the model is loaded and serving"),
                                 ("worker_kv_slots_used", used, "KV slots (sequences) in use"),
                                 ("worker_kv_slots_capacity", capacity, "KV slots (sequences) in the pool")):
            g = GaugeMetricFamily(PREFIX + name, doc, labels=names)
            g.add_metric(values, value)
            yield g


class _KernelGauges:
    """``worker_kernel_info`` (1 per chosen (format, rows, kernel)) and ``worker_kernel_probe_ms``."""

    def __init__(self, labels: dict[str, str], kernels) -> None:
        self._labels, self._kernels = labels, kernels

    def collect(self) -> Iterator[Metric]:
        names, values = [*self._labels, "format", "rows", "kernel"], list(self._labels.values())
        chosen, timings = self._kernels()
        info = GaugeMetricFamily(PREFIX + "worker_kernel_info", "Matmul or attention kernel chosen at start (1)", labels=names)
        for fmt, rows, kernel in chosen:
            info.add_metric([*values, fmt, str(rows), kernel], 1)
        probe = GaugeMetricFamily(PREFIX + "worker_kernel_probe_ms", "Start-up probe: ms per model pass",
                                  labels=names)
        for key, ms in sorted(timings.items()):
            probe.add_metric([*values, *key.split("/")], ms)
        yield info
        yield probe


class SchedulerCollector:
    """The scheduler's gauges, read at scrape time: ``ready`` (at least one warmed-up
    verifier, and a draft worker when speculating), live workers per service, gateways."""

    def __init__(self, replica: str, ready: Callable[[], bool], workers: Callable[[], dict[str, int]],
                 gateways: Callable[[], int]) -> None:
        self._replica, self._ready, self._workers, self._gateways = replica, ready, workers, gateways

    def collect(self) -> Iterator[Metric]:
        ready = GaugeMetricFamily(PREFIX + "scheduler_ready", "1 when requests can be served", labels=["replica"])
        ready.add_metric([self._replica], int(self._ready()))
        yield ready
        workers = GaugeMetricFamily(PREFIX + "scheduler_workers", "Live workers known to the scheduler",
                                    labels=["service"])
        for service, count in sorted(self._workers().items()):
            workers.add_metric([service], count)
        yield workers
        yield GaugeMetricFamily(PREFIX + "scheduler_gateways", "Gateways the scheduler sends stats to",
                                value=self._gateways())
