"""Every Prometheus metric treespec exports, by exact name: one torch-free place.

The gateway's metrics module registers METRIC_NAMES, services/probes.py the
PROBE_METRIC_LABELS of the other services; the deployment files (Prometheus alerts,
the Grafana dashboard) may reference only these names (histograms also with their
``_bucket`` / ``_sum`` / ``_count`` series), which tests/deploy checks.
"""

from __future__ import annotations

PREFIX = "treespec:"

# name -> label names
METRIC_LABELS: dict[str, tuple[str, ...]] = {
    "treespec:requests_total": ("finished_reason",),
    "treespec:http_requests_total": ("endpoint", "code"),
    "treespec:http_connections_open": (),
    "treespec:http_connections_refused_total": (),
    "treespec:http_header_timeouts_total": (),
    "treespec:prompt_tokens_total": (),
    "treespec:generation_tokens_total": (),
    "treespec:time_to_first_token_seconds": (),
    "treespec:request_queue_time_seconds": (),
    "treespec:inter_token_latency_seconds": (),
    "treespec:e2e_request_latency_seconds": (),
    "treespec:num_requests_running": (),
    "treespec:num_requests_waiting": (),
    "treespec:kv_slots_used": ("service", "replica"),
    "treespec:kv_slots_capacity": ("service", "replica"),  # a gauge: no _total
    "treespec:memory_used_bytes": ("service", "replica"),
    "treespec:memory_total_bytes": ("service", "replica"),
    "treespec:prefix_cache_queries_total": ("service", "replica"),
    "treespec:prefix_cache_hits_total": ("service", "replica"),
    "treespec:prefix_cache_blocks_used": ("service", "replica"),
    "treespec:prefix_cache_blocks_capacity": ("service", "replica"),
    "treespec:spec_decode_num_drafts_total": (),
    "treespec:spec_decode_num_draft_tokens_total": (),
    "treespec:spec_decode_num_accepted_tokens_total": (),
    "treespec:spec_decode_num_accepted_tokens_per_pos_total": ("position",),
    "treespec:mean_accepted_length": (),
    "treespec:tree_size": (),
    "treespec:overlap_guesses_total": (),
    "treespec:overlap_hits_total": (),
    "treespec:overlap_enabled": (),
    "treespec:spec_decode_plain_steps_total": (),
    "treespec:spec_decode_lookup_proposed_tokens_total": (),
    "treespec:spec_decode_lookup_accepted_tokens_total": (),
    "treespec:service_up": ("service", "replica"),
}

METRIC_NAMES: tuple[str, ...] = tuple(METRIC_LABELS)

# Served by the scheduler, draft and verifier themselves on their probe port
# (config metrics_port; services/probes.py), next to prometheus-client's process_* metrics.
PROBE_METRIC_LABELS: dict[str, tuple[str, ...]] = {
    "treespec:worker_steps_total": ("service", "replica"),
    "treespec:worker_step_failures_total": ("service", "replica"),
    "treespec:worker_step_seconds": ("service", "replica"),
    "treespec:worker_ready": ("service", "replica"),
    "treespec:worker_kv_slots_used": ("service", "replica"),
    "treespec:worker_kv_slots_capacity": ("service", "replica"),
    # the matmul kernel chosen at start per weight format and row bucket (value 1), and the
    # probe's ms per model pass for every kernel timed (common/modeling/kernel_probe.py)
    "treespec:worker_kernel_info": ("service", "replica", "format", "rows", "kernel"),
    "treespec:worker_kernel_probe_ms": ("service", "replica", "format", "rows", "kernel"),
    "treespec:scheduler_ready": ("replica",),
    "treespec:scheduler_workers": ("service",),
    "treespec:scheduler_gateways": (),
}
PROCESS_METRICS: frozenset[str] = frozenset({
    "process_cpu_seconds_total", "process_resident_memory_bytes", "process_virtual_memory_bytes",
    "process_start_time_seconds", "process_open_fds", "process_max_fds"})

HISTOGRAMS: frozenset[str] = frozenset({
    "treespec:time_to_first_token_seconds",
    "treespec:request_queue_time_seconds",
    "treespec:inter_token_latency_seconds",
    "treespec:e2e_request_latency_seconds",
    "treespec:worker_step_seconds",
})

HISTOGRAM_SUFFIXES: tuple[str, ...] = ("_bucket", "_sum", "_count")


def series_names() -> frozenset[str]:
    """Every series name a scrape of any treespec service can contain: the metrics plus
    histogram sub-series."""
    extra = {h + s for h in HISTOGRAMS for s in HISTOGRAM_SUFFIXES}
    return frozenset(METRIC_NAMES) | frozenset(PROBE_METRIC_LABELS) | PROCESS_METRICS | extra
