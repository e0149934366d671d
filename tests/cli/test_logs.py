"""treespec logs: merging, filters, follow, stdin and passthrough on recorded logs."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from treespec import logs, logview

REPO = Path(__file__).resolve().parents[2]
LOG_DIR = REPO / "tests" / "data" / "logs"
REQ_A_PATH = [("gateway", "request received"), ("scheduler", "request admitted"),
              ("draft", "tree drafted"), ("verifier", "tree verified"),
              ("draft", "slot allocation failed"), ("scheduler", "request finished"),
              ("gateway", "request finished")]


def run_cli(*argv: str, stdin: str | None = None) -> list[str]:
    """Run `treespec logs ...` in a child process; its stdout lines."""
    out = subprocess.run([sys.executable, "-m", "treespec.cli", "logs", *argv], input=stdin,
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def records(lines: list[str]) -> list[dict]:
    return [json.loads(line) for line in lines if line.startswith("{")]


def read(*sources: str, **flags) -> list[logview.Line]:
    """The lines a one-shot read of the fixture logs shows with the given filters."""
    parser = argparse.ArgumentParser()
    logs.configure(parser)
    argv = list(sources) or [str(LOG_DIR)]
    for key, value in flags.items():
        argv += [f"--{key.replace('_', '-')}", value]
    flt = logs.build_filter(parser.parse_args(argv))
    return logview.FileMerger([Path(s) for s in argv[:len(sources) or 1]], flt).poll(final=True)


class TestMerge:
    def test_timestamp_order_across_services(self):
        """Records from all files come out in timestamp order."""
        times = [line.time for line in read() if line.record is not None]
        assert times == sorted(times) and len(times) == 20

    def test_request_path_through_services(self):
        """--request-id shows one request's path through every service, in order."""
        got = [(line.record["service"], line.record["event"]) for line in read(request_id="req-a")
               if line.record is not None]
        assert got == REQ_A_PATH

    def test_non_json_lines_pass_through(self):
        """Non-JSON lines are kept verbatim, after the record they followed."""
        raws = [line.raw for line in read()]
        i = raws.index("this is not JSON: a stray print from a library")
        assert json.loads(raws[i - 1])["event"] == "tree drafted"
        tb = raws.index("Traceback (most recent call last):")
        assert json.loads(raws[tb - 1])["event"] == "slot allocation failed"

    def test_non_json_lines_follow_their_record(self):
        """A traceback after a shown record is shown; after a hidden record it is hidden."""
        raws = [line.raw for line in read(level="error")]
        assert "RuntimeError: non-JSON traceback after the error record" in raws
        assert "this is not JSON: a stray print from a library" not in raws



class TestFilters:
    def test_service(self):
        """--service keeps one service; service-replica keeps one replica."""
        assert {l.record["service"] for l in read(service="draft") if l.record} == {"draft"}
        assert {l.record["replica"] for l in read(service="draft-1") if l.record} == {"1"}
        assert {l.record["service"] for l in read(service="gateway,verifier") if l.record} == {
            "gateway", "verifier"}

    def test_min_level(self):
        """--level is a minimum: warning keeps warning, error and critical."""
        assert sorted(l.record["level"] for l in read(level="warning") if l.record) == [
            "critical", "error", "warning"]

    def test_since_iso(self):
        """--since with an ISO time drops older records."""
        kept = [l for l in read(since="2025-03-01T12:00:02.390Z") if l.record]
        assert [l.record["event"] for l in kept] == [
            "request finished", "request finished", "client disconnected", "request aborted"]

    def test_since_relative(self):
        """--since 10m drops the (2025) fixture records."""
        assert read(since="10m") == []  # the fixture is from 2025

    def test_bad_values_rejected(self):
        """A bad --level is an error naming the flag, exit status 2."""
        out = subprocess.run([sys.executable, "-m", "treespec.cli", "logs", str(LOG_DIR), "--level", "loud"],
                             capture_output=True, text=True, cwd=REPO)
        assert out.returncode == 2 and "--level" in out.stderr


class TestOutput:
    def test_json_passthrough(self):
        """--json prints matching lines byte for byte."""
        fixture = {line for f in LOG_DIR.glob("*.log") for line in f.read_text().splitlines()}
        lines = run_cli(str(LOG_DIR), "--json", "--request-id", "req-b")
        assert lines and set(lines) <= fixture
        assert {r["request_id"] for r in records(lines)} == {"req-b"}

    def test_column_view(self):
        """The default view has time, level, service-replica, request id, event and extras."""
        lines = run_cli(str(LOG_DIR), "--request-id", "req-a", "--color", "never")
        assert lines[0].split() == ["12:00:01.000", "INFO", "gateway-0", "req-a", "request", "received",
                                    "path=/v1/completions"]
        assert "\x1b[" not in "".join(lines)

    def test_color_always(self):
        """--color always colours the columns."""
        assert "\x1b[" in "".join(run_cli(str(LOG_DIR), "--color", "always"))

    def test_missing_directory(self):
        """A missing log directory is an error, not a crash."""
        out = subprocess.run([sys.executable, "-m", "treespec.cli", "logs", "/nonexistent/logs"],
                             capture_output=True, text=True, cwd=REPO)
        assert out.returncode == 1 and "no such file" in out.stderr

    def test_no_torch_import(self):
        """Importing and running treespec logs does not import torch."""
        code = ("import sys; from treespec.cli import main; main(['logs', %r, '--json']); "
                "assert 'torch' not in sys.modules" % str(LOG_DIR))
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, cwd=REPO)


class TestStdin:
    def test_stdin_stream(self):
        """`-` reads stdin, filters it and keeps arrival order (non-JSON lines too)."""
        text = "".join(f.read_text() for f in sorted(LOG_DIR.glob("*.log")))
        lines = run_cli("-", "--json", "--service", "draft", stdin=text)
        assert [json.loads(l)["replica"] for l in lines if l.startswith("{")] == ["0", "0", "0", "1", "1"]
        assert "this is not JSON: a stray print from a library" in lines

    def test_stdin_filters(self):
        """Request-id filtering works on a stream with docker compose prefixes."""
        src = [f'{p.stem}  | {line}' for p in sorted(LOG_DIR.glob("*.log"))
               for line in p.read_text().splitlines() if line.startswith("{")]
        lines = run_cli("-", "--request-id", "req-b", "--color", "never", stdin="\n".join(src) + "\n")
        assert len(lines) == 6 and all("req-b" in l for l in lines)


class TestFollow:
    def test_follow_cli(self, tmp_path):
        """`treespec logs -f` prints lines appended after it started."""
        log = tmp_path / "draft-0.log"
        log.write_text("")
        proc = subprocess.Popen([sys.executable, "-m", "treespec.cli", "logs", str(tmp_path), "-f", "--json"],
                                stdout=subprocess.PIPE, text=True, cwd=REPO)
        try:
            line = json.dumps({"timestamp": "2025-03-01T12:00:00Z", "level": "info", "event": "late",
                               "service": "draft", "replica": "0"})
            time.sleep(0.5)
            with log.open("a") as f:
                f.write(line + "\n")
            assert proc.stdout.readline().strip() == line
        finally:
            proc.terminate()
            proc.wait(10)
