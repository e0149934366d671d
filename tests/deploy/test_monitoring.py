"""Prometheus rules, scrape config and the Grafana dashboard: structure and metric names.

The YAML parses, every rule is complete, and every series an expression names is one
treespec exports (METRIC_NAMES, PROBE_METRIC_LABELS, histograms with _bucket/_sum/_count)
or Prometheus's own `up`. The alerts' behaviour is tested by promtool (test_promtool.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from services.gateway.metric_names import HISTOGRAMS, METRIC_NAMES, PROBE_METRIC_LABELS, series_names

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROMETHEUS_BUILTINS = frozenset({"up"})
KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
                      "unless", "bool", "offset", "inf", "nan"})
REQUIRED_ALERTS = ("TreespecLowMeanAcceptedLength", "TreespecQueueBacklogGrowing", "TreespecMemoryHigh",
                   "TreespecHighLatencyP95", "TreespecServiceDown")


def series_in(expr: str) -> set[str]:
    """Metric names an expression selects (strings, label matchers, ranges, grouping removed)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for m in re.finditer(r"(?<![\w:.$])([a-zA-Z_:][\w:]*)(\s*\()?", expr):
        if not m.group(2) and m.group(1).lower() not in KEYWORDS:
            names.add(m.group(1))
    return names


def rules() -> list[dict]:
    doc = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    dash = json.loads((DEPLOY / "grafana" / "dashboards" / "treespec.json").read_text())
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


class TestMetricNames:
    def test_names_are_prefixed_and_unique(self):
        """Every exported name is treespec:-prefixed and listed once."""
        assert len(set(METRIC_NAMES)) == len(METRIC_NAMES) == 34
        assert all(n.startswith("treespec:") for n in (*METRIC_NAMES, *PROBE_METRIC_LABELS))
        assert not set(METRIC_NAMES) & set(PROBE_METRIC_LABELS)
        assert HISTOGRAMS <= set(METRIC_NAMES) | set(PROBE_METRIC_LABELS)

    def test_gauges_have_no_counter_suffix(self):
        """Only counters end in _total (kv_slots_total was a gauge and is now kv_slots_capacity)."""
        counters = {"treespec:requests_total", "treespec:http_requests_total", "treespec:http_connections_refused_total",
                    "treespec:http_header_timeouts_total", "treespec:prompt_tokens_total", "treespec:generation_tokens_total",
                    "treespec:spec_decode_num_drafts_total", "treespec:spec_decode_num_draft_tokens_total",
                    "treespec:spec_decode_num_accepted_tokens_total",
                    "treespec:spec_decode_num_accepted_tokens_per_pos_total", "treespec:overlap_guesses_total", "treespec:spec_decode_plain_steps_total",
                    "treespec:overlap_hits_total", "treespec:worker_steps_total",
                    "treespec:worker_step_failures_total", "treespec:prefix_cache_queries_total",
                    "treespec:prefix_cache_hits_total", "treespec:spec_decode_lookup_proposed_tokens_total",
                    "treespec:spec_decode_lookup_accepted_tokens_total"}
        assert {n for n in (*METRIC_NAMES, *PROBE_METRIC_LABELS) if n.endswith("_total")} == counters
        assert "treespec:kv_slots_capacity" in METRIC_NAMES

    def test_series_in_parses_promql(self):
        """series_in finds metric names and skips functions, labels, keywords and ranges."""
        expr = ('histogram_quantile(0.95, sum by (le) (rate(a:b_bucket{x="y"}[5m]))) > 1 '
                "and ignoring(position) group_left c / d offset 5m")
        assert series_in(expr) == {"a:b_bucket", "c", "d"}


class TestAlerts:
    def test_rules_complete(self):
        """Each rule has alert, expr, for, labels.severity and summary/description."""
        for rule in rules():
            assert {"alert", "expr", "for", "labels", "annotations"} <= set(rule), rule.get("alert")
            assert rule["labels"]["severity"] in ("warning", "critical")
            assert {"summary", "description"} <= set(rule["annotations"])
            assert re.fullmatch(r"\d+[smh]", rule["for"])

    def test_required_alerts(self):
        """MAL, backlog, memory, p95 latency and service-down alerts exist."""
        assert set(REQUIRED_ALERTS) <= {r["alert"] for r in rules()}

    @pytest.mark.parametrize("rule", rules(), ids=lambda r: r["alert"])
    def test_alert_metrics_exported(self, rule):
        """Every series an alert uses is exported by treespec (or is Prometheus's `up`)."""
        unknown = series_in(rule["expr"]) - series_names() - PROMETHEUS_BUILTINS
        assert not unknown

    def test_scrape_config(self):
        """Prometheus scrapes gateway:8000 and every scheduler/draft/verifier replica's probe
        port (DNS discovery), and loads the alert rules."""
        cfg = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
        jobs = {job["job_name"]: job for job in cfg["scrape_configs"]}
        assert set(jobs) == {"treespec-gateway", "treespec-scheduler", "treespec-draft", "treespec-verifier"}
        assert all(job["metrics_path"] == "/metrics" for job in jobs.values())
        assert jobs["treespec-gateway"]["static_configs"][0]["targets"] == ["gateway:8000"]
        for name in ("scheduler", "draft", "verifier"):
            (sd,) = jobs[f"treespec-{name}"]["dns_sd_configs"]
            assert sd["names"] == [name] and sd["port"] == 9101
        assert cfg["rule_files"] == ["/etc/prometheus/alerts.yml"]


class TestDashboard:
    def test_dashboard_metrics_exported(self):
        """Every series a dashboard panel queries is exported by treespec."""
        for expr in dashboard_exprs():
            assert not series_in(expr) - series_names(), expr

    def test_dashboard_covers_topics(self):
        """Panels cover tokens/s, MAL, acceptance by depth, TTFT/ITL, queue and memory."""
        used = set().union(*(series_in(e) for e in dashboard_exprs()))
        for name in ("treespec:generation_tokens_total", "treespec:mean_accepted_length",
                     "treespec:spec_decode_num_accepted_tokens_per_pos_total",
                     "treespec:time_to_first_token_seconds_bucket",
                     "treespec:inter_token_latency_seconds_bucket", "treespec:num_requests_waiting",
                     "treespec:memory_used_bytes"):
            assert name in used

    def test_variables(self):
        """job, instance and replica variables exist and every query filters by job and instance
        (per-replica series by replica too)."""
        dash = json.loads((DEPLOY / "grafana/dashboards/treespec.json").read_text())
        assert [v["name"] for v in dash["templating"]["list"]] == ["job", "instance", "replica"]
        for expr in dashboard_exprs():
            assert 'job=~"$job"' in expr and 'instance=~"$instance"' in expr, expr
            if "kv_slots" in expr or "memory_" in expr or "service_up" in expr:
                assert 'replica=~"$replica"' in expr, expr

    def test_provisioning(self):
        """The datasource uid matches the dashboard's and the provider points at its folder."""
        ds = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())
        prov = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/treespec.yml").read_text())
        dash = json.loads((DEPLOY / "grafana/dashboards/treespec.json").read_text())
        assert ds["datasources"][0]["uid"] == "prometheus"
        assert ds["datasources"][0]["url"] == "http://prometheus:9090"
        assert prov["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
        assert {p["datasource"]["uid"] for p in dash["panels"]} == {"prometheus"}
        assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
