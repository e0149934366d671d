"""common.logging: every line a service writes is a JSON event (library logs and warnings
included) and progress bars stay out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SERVICE = """
import logging, warnings
from common.logging import quiet_progress_bars, route_library_logging, setup_logging
quiet_progress_bars()  # what treespec.cli.main does for service commands, before their imports
import tqdm
log = setup_logging("draft", "draft-x", "info")
route_library_logging()
import tqdm
from transformers.utils import logging as hf_logging
hf_logging.get_logger("transformers.modeling_utils").warning("a transformers warning")
warnings.warn("a library warning", UserWarning)
logging.getLogger("common.modeling.loader").info('loader says "hi"')
logging.getLogger("noisy").debug("below the level")
for _ in tqdm.tqdm(range(3), desc="Loading weights"):
    pass
for _ in hf_logging.tqdm(range(3), desc="Loading checkpoint shards"):
    pass
log.info("done", request_id="req-1")
"""


class TestServiceLogs:
    def test_every_line_is_json(self):
        """transformers and stdlib log records and warnings.warn become JSON events with service,
        replica, level, timestamp and logger; tqdm bars print nothing (stderr included)."""
        out = subprocess.run([sys.executable, "-c", SERVICE], cwd=REPO, capture_output=True, text=True,
                             timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
        assert out.returncode == 0, out.stderr
        lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
        records = [json.loads(line) for line in lines]  # raises on any non-JSON line
        assert all(r["service"] == "draft" and r["replica"] == "draft-x" and r["timestamp"] for r in records)
        by_event = {r["event"].splitlines()[0] if "\n" in r["event"] else r["event"]: r for r in records}
        assert by_event["a transformers warning"]["level"] == "warning"
        assert by_event["a transformers warning"]["logger"] == "transformers.modeling_utils"
        assert by_event['loader says "hi"']["logger"] == "common.modeling.loader"
        (warning,) = [r for r in records if r.get("logger") == "py.warnings"]
        assert "UserWarning: a library warning" in warning["event"] and warning["level"] == "warning"
        assert by_event["done"]["request_id"] == "req-1"
        assert not any("below the level" in line or "Loading" in line for line in lines)


class TestCli:
    def test_service_commands_quiet_progress_bars_first(self):
        """`treespec <service>` sets the progress-bar switches before importing the service
        (tqdm reads them at import); other commands leave them alone."""
        code = ("import os, sys; from treespec.cli import main; rc = main(sys.argv[1:]); "
                "print(rc, os.environ.get('TQDM_DISABLE'), 'services.scheduler.main' in sys.modules)")
        env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
        run = lambda *argv: subprocess.run([sys.executable, "-c", code, *argv], cwd=REPO, env=env,
                                           capture_output=True, text=True, timeout=60).stdout.split()
        assert run("scheduler", "--set", "no_such_key=1") == ["2", "1", "True"]
        assert run("logs", "/nonexistent") == ["1", "None", "False"]
