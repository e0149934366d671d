"""Every Prometheus metric treespec exports, by exact name: one torch-free place.

The gateway's metrics module registers these; the deployment files (Prometheus alerts,
the Grafana dashboard) may reference only these names (histograms also with their
``_bucket`` / ``_sum`` / ``_count`` series), which tests/deploy checks.
"""

from __future__ import annotations

PREFIX = "treespec:"

# name -> label names
METRIC_LABELS: dict[str, tuple[str, ...]] = {
    "treespec:requests_total": ("status",),
    "treespec:prompt_tokens_total": (),
    "treespec:generation_tokens_total": (),
    "treespec:time_to_first_token_seconds": (),
    "treespec:inter_token_latency_seconds": (),
    "treespec:e2e_request_latency_seconds": (),
    "treespec:num_requests_running": (),
    "treespec:num_requests_waiting": (),
    "treespec:kv_slots_used": ("service", "replica"),
    "treespec:kv_slots_total": ("service", "replica"),
    "treespec:memory_used_bytes": ("service", "replica"),
    "treespec:memory_total_bytes": ("service", "replica"),
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
    "treespec:service_up": ("service", "replica"),
}

METRIC_NAMES: tuple[str, ...] = tuple(METRIC_LABELS)

HISTOGRAMS: frozenset[str] = frozenset({
    "treespec:time_to_first_token_seconds",
    "treespec:inter_token_latency_seconds",
    "treespec:e2e_request_latency_seconds",
})

HISTOGRAM_SUFFIXES: tuple[str, ...] = ("_bucket", "_sum", "_count")


def series_names() -> frozenset[str]:
    """Every series name a scrape can contain: the metrics plus histogram sub-series."""
    extra = {h + s for h in HISTOGRAMS for s in HISTOGRAM_SUFFIXES}
    return frozenset(METRIC_NAMES) | extra
