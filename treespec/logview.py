"""Parsing, filtering and merging of the services' JSON log lines. Pure and
torch-free; ``treespec/logs.py`` is the command around it.

Sources are the files ``<log_dir>/<service>-<replica>.log`` written by ``treespec up``
(one structlog JSON object per line: ``timestamp``, ``level``, ``event``, ``service``,
``replica``, optionally ``request_id``, plus extra fields), given files or directories,
or a stream (standard input).

Files are merged in timestamp order, so a request-id filter shows one request's whole path
through gateway, scheduler, draft and verifier. When following, each poll's new lines
(from every file, including files of replicas that appear later) are merged the same
way. A stream is read in arrival order; ``docker compose logs`` prefixes
(``draft-1  | ``) name each line's origin there.

Filters apply to every line. A line that is not a JSON object (a crash traceback, a stray
print) is kept untouched; it belongs to its origin (file stem or compose prefix), so
``--service`` judges it by that, and for the other filters it is shown only right after
a shown JSON record of the same origin (a traceback follows its error line). Before the
first record of an origin it is shown only when no level, request-id or time filter is
set. In a stream without prefixes the origin is unknown, so a non-JSON line follows the
stream's last record for every filter. Naive timestamps are UTC.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator, TextIO

LEVELS = {"debug": 10, "info": 20, "warn": 30, "warning": 30, "error": 40,
          "exception": 40, "critical": 50, "fatal": 50}
DEFAULT_LEVEL = "info"
CORE_KEYS = ("timestamp", "level", "event", "service", "replica", "request_id")
POLL_INTERVAL_S = 0.2
EARLIEST = datetime.min.replace(tzinfo=timezone.utc)
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PREFIX = re.compile(r"^([\w.\-]+?)\s*\| ?")  # "draft-1  | ..." from docker compose logs


@dataclass(frozen=True)
class Line:
    """One input line: the raw text (no newline) and, for a JSON object, its record."""

    raw: str
    record: dict | None  # None for a non-JSON line
    time: datetime  # the record's timestamp; a non-JSON line inherits the previous one
    origin: str  # file stem ("draft-1") or "-" for stdin


@dataclass(frozen=True)
class Filter:
    """Which records to show; an empty filter shows everything."""

    services: frozenset[str] = frozenset()  # service names or "service-replica"
    min_level: int = 0
    request_id: str | None = None
    since: datetime | None = None

    @property
    def needs_record(self) -> bool:
        """True when a filter other than --service is set: such filters judge JSON records,
        and a non-JSON line can only follow a record they showed."""
        return self.min_level > 0 or self.request_id is not None or self.since is not None

    def accepts_text(self, origin: str) -> bool:
        """Whether a non-JSON line from ``origin`` passes --service (its own origin decides)."""
        return not self.services or bool(self.services & _service_names({}, origin))

    def accepts(self, record: dict, origin: str) -> bool:
        """True if the record passes every filter that is set."""
        if self.services and not self.services & _service_names(record, origin):
            return False
        if _level_value(record) < self.min_level:
            return False
        if self.request_id is not None and not _has_request_id(record, self.request_id):
            return False
        if self.since is not None and parse_time(record.get("timestamp")) < self.since:
            return False
        return True


def _service_names(record: dict, origin: str) -> set[str]:
    service, replica = service_of(record, origin)
    return {service, f"{service}-{replica}"} if replica != "" else {service}


def service_of(record: dict, origin: str) -> tuple[str, str]:
    """(service, replica) from the record, else from the file stem ``<service>-<replica>``."""
    stem_service, _, stem_replica = origin.rpartition("-")
    if not stem_service:
        stem_service, stem_replica = origin, ""
    service = str(record.get("service", stem_service))
    replica = str(record.get("replica", stem_replica if "service" not in record else ""))
    return service, replica


def _level_value(record: dict) -> int:
    return LEVELS.get(str(record.get("level", DEFAULT_LEVEL)).lower(), LEVELS[DEFAULT_LEVEL])


def _has_request_id(record: dict, request_id: str) -> bool:
    """Whether the record is about a request whose id starts with ``request_id`` (the whole id,
    or its first characters as the column view shows them)."""
    if str(record.get("request_id", "")).startswith(request_id):
        return True
    ids = record.get("request_ids")
    return isinstance(ids, list) and any(str(i).startswith(request_id) for i in ids)


def parse_time(value: object) -> datetime:
    """An ISO 8601 string or epoch seconds as an aware datetime; EARLIEST if unparsable."""
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return datetime.fromtimestamp(value, timezone.utc)
        t = datetime.fromisoformat(str(value))
    except (TypeError, ValueError, OverflowError, OSError):
        return EARLIEST
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``10m`` / ``2h`` / ``30s`` / ``1d`` before now, or an ISO 8601 time; ValueError otherwise."""
    m = _RELATIVE.match(text.strip())
    if m:
        now = now or datetime.now(timezone.utc)
        return now - timedelta(seconds=float(m.group(1)) * _UNIT_S[m.group(2)])
    t = parse_time(text.strip())
    if t == EARLIEST:
        raise ValueError(f"--since must be like 10m, 2h, 1d or an ISO 8601 time, got {text!r}")
    return t


def parse_level(text: str) -> int:
    """A level name's value; ValueError naming the choices otherwise."""
    if text.lower() not in LEVELS:
        raise ValueError(f"--level must be one of {', '.join(sorted(LEVELS))}, got {text!r}")
    return LEVELS[text.lower()]


def parse_line(raw: str, origin: str, previous: datetime, prefixed: bool = False) -> Line:
    """Parse one line; a non-JSON line (or JSON that is not an object) keeps ``previous`` time.

    ``prefixed`` (a ``docker compose logs`` stream): a ``service-N  | `` prefix is removed
    and names the line's origin. Otherwise only a prefix before a JSON object is removed.
    """
    text = raw
    m = _PREFIX.match(raw)
    if m and (prefixed or raw[m.end():].lstrip().startswith("{")):
        text = raw[m.end():]
        origin = m.group(1) if prefixed else origin
    record = None
    if text.lstrip().startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        record = obj if isinstance(obj, dict) else None
    if record is None:
        return Line(raw, None, previous, origin)
    t = parse_time(record.get("timestamp"))
    return Line(raw, record, t if t != EARLIEST else previous, origin)


@dataclass
class Source:
    """One input (a file or stdin): reads complete new lines and decides which are shown.

    A file is read from ``position``; a partial last line waits for its newline. A file
    that shrank (rotated or truncated) is read again from the start.
    """

    path: Path | None  # None for stdin
    origin: str
    position: int = 0
    partial: str = ""
    last_time: datetime = EARLIEST
    # origin -> was its last JSON record shown (a non-JSON line follows it); a stream has
    # many origins (compose prefixes), a file one
    shown: dict[str, bool] = field(default_factory=dict)

    def read_new(self, final: bool = False) -> list[str]:
        """The complete lines appended since the last call (file sources only).

        ``final``: also return an unterminated last line (nothing more will be read).
        """
        assert self.path is not None
        try:
            size = self.path.stat().st_size
            if size < self.position:
                self.position, self.partial = 0, ""
            with self.path.open("rb") as f:
                f.seek(self.position)
                data = f.read()
        except FileNotFoundError:
            return []
        self.position += len(data)
        text = self.partial + data.decode("utf-8", errors="replace")
        *lines, self.partial = text.split("\n")
        if final and self.partial:
            lines.append(self.partial)
            self.partial = ""
        return lines

    def select(self, raws: Iterable[str], flt: Filter) -> list[Line]:
        """Parse lines and keep those the filter shows (non-JSON lines: see the module doc)."""
        kept = []
        for raw in raws:
            raw = raw.rstrip("\r")
            line = parse_line(raw, self.origin, self.last_time, prefixed=self.path is None)
            self.last_time = line.time
            if line.record is not None:
                show = self.shown[line.origin] = flt.accepts(line.record, line.origin)
            elif line.origin == "-":  # an unprefixed stream: the origin is unknown, so every
                show = bool(raw) and self.shown.get("-", not (flt.needs_record or flt.services))  # filter
            else:
                show = (bool(raw) and flt.accepts_text(line.origin)
                        and self.shown.get(line.origin, not flt.needs_record))
            if show:
                kept.append(line)
        return kept


def merge(batches: Iterable[list[Line]]) -> list[Line]:
    """All lines in timestamp order; stable, so equal times keep source order."""
    return sorted((line for batch in batches for line in batch), key=lambda line: line.time)


def discover(paths: Iterable[Path]) -> list[Path]:
    """The log files named by ``paths``: files as given, directories' ``*.log`` sorted."""
    found: list[Path] = []
    for p in paths:
        found.extend(sorted(p.glob("*.log")) if p.is_dir() else [p])
    return found


@dataclass
class FileMerger:
    """Reads a set of log files (and directories, re-scanned for new files) in time order."""

    paths: list[Path]
    flt: Filter
    sources: dict[Path, Source] = field(default_factory=dict)

    def poll(self, final: bool = False) -> list[Line]:
        """Every newly completed line from every file, filtered and merged by timestamp.

        ``final``: a one-shot read, so unterminated last lines count too.
        """
        for path in discover(self.paths):
            if path not in self.sources:
                self.sources[path] = Source(path, path.stem)
        return merge(s.select(s.read_new(final), self.flt) for s in self.sources.values())

    def follow(self, emit: Callable[[Line], None], stop: threading.Event,
               interval: float = POLL_INTERVAL_S) -> None:
        """Emit what is there, then keep polling until ``stop`` is set."""
        while True:
            for line in self.poll():
                emit(line)
            if stop.wait(interval):
                return


def stream(stdin: TextIO, flt: Filter) -> Iterator[Line]:
    """Lines from a stream, filtered, in arrival order (the producer may never end)."""
    source = Source(None, "-")
    for raw in stdin:
        yield from source.select([raw.rstrip("\n")], flt)
