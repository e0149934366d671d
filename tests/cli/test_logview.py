"""treespec.logview: line parsing, time parsing, file sources and the follow merger."""

from __future__ import annotations

import io
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


def _rec(service: str, replica: str, second: int, event: str, **extra) -> str:
    return json.dumps({"timestamp": f"2025-03-01T12:00:{second:02d}Z", "level": extra.pop("level", "info"),
                       "event": event, "service": service, "replica": replica, **extra})


class TestFiltersOnEveryLine:
    def test_leading_non_json_lines_hidden_by_request_filter(self, tmp_path):
        """Progress bars and warnings printed before a file's first record are hidden by
        --request-id (they belong to no request) but shown without filters."""
        log = tmp_path / "draft-0.log"
        log.write_text("Loading weights: 100%|##########| 290/290\nUserWarning: something\n"
                       + _rec("draft", "0", 1, "sequence placed", request_id="req-a") + "\n"
                       + _rec("draft", "0", 2, "sequence placed", request_id="req-b") + "\n")
        shown = logview.FileMerger([log], logview.Filter(request_id="req-a")).poll(final=True)
        assert [line.record["request_id"] for line in shown] == ["req-a"]
        assert len(logview.FileMerger([log], logview.Filter()).poll(final=True)) == 4

    def test_request_filter_matches_the_shortened_id_the_column_shows(self, tmp_path):
        """--request-id with the first characters of an id (the column view cuts ids short) shows
        that request's records, also inside a batch's request_ids, and not another request's."""
        log = tmp_path / "scheduler-0.log"
        log.write_text(_rec("scheduler", "0", 1, "admitted", request_id="chatcmpl-8e8f00d1") + "\n"
                       + _rec("scheduler", "0", 2, "round", request_ids=["chatcmpl-1111", "chatcmpl-8e8f00d1"]) + "\n"
                       + _rec("scheduler", "0", 3, "admitted", request_id="chatcmpl-77aa") + "\n")
        shown = logview.FileMerger([log], logview.Filter(request_id="chatcmpl-8e8")).poll(final=True)
        assert [line.record["event"] for line in shown] == ["admitted", "round"]

    def test_compose_stream_prefix_names_the_origin(self):
        """In `docker compose logs` output, a non-JSON line is judged by its own prefix: --service
        hides other services' lines, --request-id hides lines before a matching record, and a
        traceback after a matching error record of the same container is kept although other
        containers' lines come in between."""
        text = "\n".join([
            "verifier-1  | Loading checkpoint shards: 100%",
            "draft-1     | Loading weights: 50%",
            "draft-1     | " + _rec("draft", "abc", 1, "step failed", level="error", request_id="req-a"),
            "verifier-1  | " + _rec("verifier", "def", 2, "sequence placed", request_id="req-b"),
            "draft-1     | Traceback (most recent call last):",
            "verifier-1  | a stray verifier print",
        ]) + "\n"
        by_service = list(logview.stream(io.StringIO(text), logview.Filter(services=frozenset({"draft"}))))
        assert [line.raw.split("|", 1)[1].strip()[:9] for line in by_service] == ["Loading w", '{"timesta',
                                                                                  "Traceback"]
        by_request = list(logview.stream(io.StringIO(text), logview.Filter(request_id="req-a")))
        assert [line.raw.split("|", 1)[0].strip() for line in by_request] == ["draft-1", "draft-1"]
        assert by_request[1].raw.endswith("Traceback (most recent call last):")
