"""Prometheus metrics of one gateway, in its own CollectorRegistry (no module globals).

Request metrics are observed by the gateway itself; scheduler and worker metrics are read
from the latest ``wire.Stats`` at scrape time by :class:`StatsCollector`, and the client
connections from the server's guard by :class:`ConnectionCollector`. Exported names
(``metric_names.METRIC_NAMES``) are the contract with the Grafana / Prometheus files. Labels:
``finished_reason`` = how an admitted generation request ended (stop / length / abort: the
client went away / error: the backend failed it; refusals are not generations); ``code`` = the
HTTP status of every answered request ("200", "400", ..., "499" when the client left before the
response was complete), with ``endpoint`` = its route ("/v1/chat/completions", "/v1/models/{model}", ...;
"unmatched" for unknown paths and methods); ``service`` = gateway / scheduler / draft /
verifier; ``position`` = depth in the draft tree (0 = first drafted token).
"""

from __future__ import annotations

from typing import Callable, Iterator

from prometheus_client import (CollectorRegistry, Counter, Histogram, disable_created_metrics,
                               generate_latest)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from common import wire
from services.gateway.metric_names import PREFIX

P = PREFIX
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class StatsCollector:
    """Scheduler/worker gauges and counters from the latest Stats, computed per scrape."""

    def __init__(self, replica: str, get_stats: Callable[[], wire.Stats | None],
                 scheduler_up: Callable[[], bool]):
        self._replica, self._get_stats, self._scheduler_up = replica, get_stats, scheduler_up

    def collect(self) -> Iterator[Metric]:
        stats = self._get_stats() if self._scheduler_up() else None
        yield self._service_up(stats)
        if stats is None:
            return
        yield GaugeMetricFamily(P + "num_requests_running", "Requests being decoded", value=stats.running)
        yield GaugeMetricFamily(P + "num_requests_waiting", "Requests queued", value=stats.waiting)
        yield from self._worker_gauges(stats.workers)
        yield from self._spec(stats)

    def _service_up(self, stats: wire.Stats | None) -> Metric:
        up = GaugeMetricFamily(P + "service_up", "1 for each live service", labels=["service", "replica"])
        up.add_metric(["gateway", self._replica], 1)
        up.add_metric(["scheduler", "0"], 1 if self._scheduler_up() else 0)
        for w in stats.workers if stats else []:
            up.add_metric([_service(w), w.replica], 1)
        return up

    @staticmethod
    def _worker_gauges(workers: list[wire.Heartbeat]) -> Iterator[Metric]:
        fields = {"kv_slots_used": "slots_used", "kv_slots_capacity": "slots_total",
                  "memory_used_bytes": "memory_used", "memory_total_bytes": "memory_total",
                  "prefix_cache_blocks_used": "prefix_cache_blocks_used",
                  "prefix_cache_blocks_capacity": "prefix_cache_blocks_total"}
        for name, attr in fields.items():
            g = GaugeMetricFamily(P + name, f"Worker {attr.replace('_', ' ')}", labels=["service", "replica"])
            for w in workers:
                g.add_metric([_service(w), w.replica], getattr(w, attr))
            yield g
        counters = {"prefix_cache_queries": "Prompt tokens looked up in the prefix cache",
                    "prefix_cache_hits": "Prompt tokens reused from the prefix cache"}
        for name, doc in counters.items():
            c = CounterMetricFamily(P + name, doc, labels=["service", "replica"])
            for w in workers:
                c.add_metric([_service(w), w.replica], getattr(w, name))
            yield c

    @staticmethod
    def _spec(s: wire.Stats) -> Iterator[Metric]:
        yield CounterMetricFamily(P + "spec_decode_num_drafts", "Draft trees verified", value=s.num_drafts)
        yield CounterMetricFamily(P + "spec_decode_num_draft_tokens", "Draft tree nodes verified",
                                  value=s.num_draft_tokens)
        yield CounterMetricFamily(P + "spec_decode_num_accepted_tokens", "Draft tokens accepted",
                                  value=s.num_accepted_tokens)
        per_pos = CounterMetricFamily(P + "spec_decode_num_accepted_tokens_per_pos",
                                      "Draft tokens accepted at each tree depth", labels=["position"])
        for pos, count in enumerate(s.accepted_per_pos):
            per_pos.add_metric([str(pos)], count)
        yield per_pos
        mal = (s.num_accepted_tokens + s.num_drafts) / s.num_drafts if s.num_drafts else 0.0
        yield GaugeMetricFamily(P + "mean_accepted_length",
                                "Tokens committed per verification (accepted + bonus)", value=mal)
        yield GaugeMetricFamily(P + "tree_size", "Draft tree nodes per sequence", value=s.tree_size)
        yield CounterMetricFamily(P + "overlap_guesses", "Look-ahead trees drafted during verification "
                                  "(draft/verify overlap)", value=s.guesses)
        yield CounterMetricFamily(P + "overlap_hits", "Look-ahead trees used (the verifier accepted the "
                                  "assumed path)", value=s.guess_hits)
        yield GaugeMetricFamily(P + "overlap_enabled", "1 when draft/verify overlap is on", value=int(s.overlap))
        yield CounterMetricFamily(P + "spec_decode_plain_steps", "Sequence steps verified without a draft tree "
                                  "while speculation is on (no draft worker: degraded)", value=s.plain_steps)
        yield CounterMetricFamily(P + "spec_decode_lookup_proposed_tokens", "Prompt-lookup (n-gram) tokens "
                                  "placed in verified trees", value=s.lookup_proposed)
        yield CounterMetricFamily(P + "spec_decode_lookup_accepted_tokens", "Prompt-lookup (n-gram) tokens "
                                  "accepted by the main model", value=s.lookup_accepted)


class ConnectionCollector:
    """The gateway's client connections at scrape time, from ``get_guard()`` (``server.ConnectionGuard``; None
    before the server listens, or under a test server: zeros): open now, refused at accept because
    ``max_connections`` were open, and closed by the header timer (``header_timeout_s``)."""

    def __init__(self, get_guard: Callable[[], object | None]):
        self._get_guard = get_guard

    def collect(self) -> Iterator[Metric]:
        guard = self._get_guard()
        opened, refused, timeouts = (guard.open, guard.refused, guard.timeouts) if guard is not None else (0, 0, 0)
        yield GaugeMetricFamily(P + "http_connections_open", "Open client connections", value=opened)
        yield CounterMetricFamily(P + "http_connections_refused", "Client connections closed at accept: "
                                  "max_connections were open", value=refused)
        yield CounterMetricFamily(P + "http_header_timeouts", "Client connections closed because no request "
                                  "headers arrived within header_timeout_s", value=timeouts)


def _service(worker: wire.Heartbeat) -> str:
    return worker.role.value if worker.role is not None else "unknown"


class Metrics:
    """The gateway's registry and request-level instruments."""

    def __init__(self, replica: str = "0", get_stats: Callable[[], wire.Stats | None] = lambda: None,
                 scheduler_up: Callable[[], bool] = lambda: False,
                 get_guard: Callable[[], object | None] = lambda: None):
        disable_created_metrics()  # no *_created series: export exactly METRIC_NAMES
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(P + "requests", "Generation requests by how they ended", ["finished_reason"],
                                registry=r)
        self.http_requests = Counter(P + "http_requests", "HTTP requests answered, by route and status",
                                     ["endpoint", "code"], registry=r)
        self.prompt_tokens = Counter(P + "prompt_tokens", "Prompt tokens processed", registry=r)
        self.generation_tokens = Counter(P + "generation_tokens", "Tokens generated", registry=r)
        self.ttft = Histogram(P + "time_to_first_token_seconds", "Time to first token",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.queue_time = Histogram(P + "request_queue_time_seconds", "Time a request waited in the scheduler's "
                                    "queue before admission (part of the time to first token)",
                                    buckets=LATENCY_BUCKETS, registry=r)
        self.itl = Histogram(P + "inter_token_latency_seconds", "Time between output tokens",
                             buckets=ITL_BUCKETS, registry=r)
        self.e2e = Histogram(P + "e2e_request_latency_seconds", "Request latency, end to end",
                             buckets=LATENCY_BUCKETS, registry=r)
        r.register(StatsCollector(replica, get_stats, scheduler_up))
        r.register(ConnectionCollector(get_guard))

    def render(self) -> bytes:
        return generate_latest(self.registry)
