"""treespec.logview: line parsing, time parsing, file sources and the follow merger."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from treespec import logview

LOG_DIR = Path(__file__).resolve().parents[2] / "tests" / "data" / "logs"


class TestParseLine:
    def test_docker_compose_prefix_is_stripped(self):
        """A `service-1  | {...}` prefix from docker compose logs does not hide the JSON."""
        line = logview.parse_line('draft-1  | {"timestamp": "2025-03-01T12:00:00Z", "event": "x"}', "-",
                               logview.EARLIEST)
        assert line.record == {"timestamp": "2025-03-01T12:00:00Z", "event": "x"}


class TestParseTimes:
    def test_since_relative(self):
        """10m / 2h count back from now."""
        now = datetime(2025, 3, 1, 12, 10, tzinfo=timezone.utc)
        assert logview.parse_since("10m", now) == now - timedelta(minutes=10)
        assert logview.parse_since("2h", now) == now - timedelta(hours=2)

    def test_bad_values_rejected(self):
        """A bad since or level raises ValueError naming the flag."""
        with pytest.raises(ValueError, match="--since"):
            logview.parse_since("yesterday")
        with pytest.raises(ValueError, match="--level"):
            logview.parse_level("loud")


class TestFileMerger:
    def test_follow_growing_file(self, tmp_path):
        """With follow, lines appended by another thread (and new replica files) show up."""
        (tmp_path / "gateway-0.log").write_text((LOG_DIR / "gateway-0.log").read_text())
        seen: list[logview.Line] = []
        stop = threading.Event()
        merger = logview.FileMerger([tmp_path], logview.Filter(request_id="req-z"))
        follower = threading.Thread(target=merger.follow, args=(seen.append, stop, 0.02))
        follower.start()

        def record(service: str, second: int, event: str) -> str:
            return json.dumps({"timestamp": f"2025-03-01T12:01:{second:02d}Z", "level": "info",
                               "event": event, "service": service, "replica": "0",
                               "request_id": "req-z"}) + "\n"

        def writer() -> None:
            with (tmp_path / "gateway-0.log").open("a") as f:
                f.write(record("gateway", 1, "request received"))
                f.flush()
                time.sleep(0.1)
                f.write(record("gateway", 3, "first")[:30])  # half a line: waits for the rest
                f.flush()
                time.sleep(0.1)
                f.write(record("gateway", 3, "first")[30:])
            (tmp_path / "verifier-0.log").write_text(record("verifier", 2, "tree verified"))

        threading.Thread(target=writer).start()
        deadline = time.monotonic() + 10
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        stop.set()
        follower.join(5)
        events = [l.record["event"] for l in seen]  # each poll is merged; polls come in arrival order
        assert events[0] == "request received" and sorted(events[1:]) == ["first", "tree verified"]


class TestSource:
    def test_truncated_file_read_again(self, tmp_path):
        """A file that shrank (rotated) is read from its start."""
        log = tmp_path / "scheduler-0.log"
        log.write_text("one\ntwo\n")
        source = logview.Source(log, log.stem)
        assert source.read_new() == ["one", "two"]
        log.write_text("three\n")
        assert source.read_new() == ["three"]
