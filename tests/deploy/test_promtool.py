"""The Prometheus files checked by promtool itself: rule syntax, scrape config, and the
alert unit tests in deploy/prometheus/tests (a vanished verifier fires an alert).

promtool comes from Debian's ``prometheus`` package (``apt-get install -y prometheus``;
``.ci/run`` installs it). Without it these tests are skipped locally and fail in CI
(``TREESPEC_CI=1``), so CI never passes without running them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
    if path is None:
        if os.environ.get("TREESPEC_CI"):
            pytest.fail("promtool not found: apt-get install -y prometheus (CI must run the alert tests)")
        pytest.skip("promtool not installed (apt-get install -y prometheus)")
    return path


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=120)


class TestPromtool:
    def test_rules_check(self, promtool):
        """promtool accepts alerts.yml."""
        out = run(promtool, "check", "rules", str(PROMETHEUS / "alerts.yml"))
        assert out.returncode == 0, out.stdout + out.stderr

    def test_scrape_config_check(self, promtool, tmp_path):
        """promtool accepts prometheus.yml (its rule file path pointed at the repo's copy)."""
        cfg = (PROMETHEUS / "prometheus.yml").read_text().replace("/etc/prometheus/alerts.yml",
                                                                  str(PROMETHEUS / "alerts.yml"))
        (tmp_path / "prometheus.yml").write_text(cfg)
        out = run(promtool, "check", "config", str(tmp_path / "prometheus.yml"))
        assert out.returncode == 0, out.stdout + out.stderr

    def test_alert_unit_tests(self, promtool):
        """Every case of deploy/prometheus/tests/alerts_test.yml passes (vanished verifier,
        scheduler at 0, dead probe target, MAL over a window, no draft worker)."""
        out = run(promtool, "test", "rules", str(PROMETHEUS / "tests" / "alerts_test.yml"))
        assert out.returncode == 0, out.stdout + out.stderr
        assert "SUCCESS" in out.stdout

    def test_vanished_verifier_not_caught_by_old_rule(self, promtool, tmp_path):
        """The unit tests can fail: with the old `treespec:service_up == 0` rule the vanished
        verifier case fails."""
        alerts = (PROMETHEUS / "alerts.yml").read_text()
        start = alerts.index("      - alert: TreespecReplicaVanished")
        end = alerts.index("      - alert: TreespecNoDraftWorker")
        old = alerts[:start] + alerts[start:end].replace(
            alerts[start:end].split("expr: >-")[1].split("for:")[0], "\n          treespec:service_up == 0\n        ", 1
        ) + alerts[end:]
        (tmp_path / "alerts.yml").write_text(old)
        (tmp_path / "tests").mkdir()
        (tmp_path / "tests" / "alerts_test.yml").write_text((PROMETHEUS / "tests" / "alerts_test.yml").read_text())
        out = run(promtool, "test", "rules", str(tmp_path / "tests" / "alerts_test.yml"))
        assert out.returncode != 0 and "TreespecReplicaVanished" in out.stdout + out.stderr
