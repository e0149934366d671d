"""Rendering of parsed log lines for ``treespec logs``: the column view (time, level,
service-replica, request id, event, extra fields), ANSI or ``rich`` colours, or the raw
JSON. Pure and torch-free; parsing and filtering are in :mod:`treespec.logview`.
"""

from __future__ import annotations

import json
from typing import Callable, TextIO

from treespec.logview import CORE_KEYS, DEFAULT_LEVEL, EARLIEST, Line, service_of

REQUEST_ID_WIDTH = 12
SERVICE_WIDTH = 12
LEVEL_STYLES = {"debug": "dim", "info": "green", "warning": "yellow", "error": "bold red",
                "critical": "bold white on red"}
SERVICE_STYLES = {"gateway": "cyan", "scheduler": "magenta", "draft": "blue", "verifier": "yellow"}


def segments(line: Line) -> list[tuple[str, str]]:
    """The column view of a record as (text, style) pieces; a non-JSON line is one piece."""
    rec = line.record
    if rec is None:
        return [(line.raw, "")]
    level = str(rec.get("level", DEFAULT_LEVEL)).lower()
    service, replica = service_of(rec, line.origin)
    name = f"{service}-{replica}" if replica != "" else service
    stamp = line.time.strftime("%H:%M:%S.%f")[:-3] if line.time != EARLIEST else "-" * 12
    rid = str(rec.get("request_id", ""))[:REQUEST_ID_WIDTH]
    extras = " ".join(f"{k}={_value(v)}" for k, v in rec.items()
                      if k not in CORE_KEYS and k not in ("exception", "stack"))
    parts = [(stamp, "dim"), (" ", ""), (f"{level.upper():<9}", LEVEL_STYLES.get(level, "")),
             (f"{name:<{SERVICE_WIDTH}}", SERVICE_STYLES.get(service, "")), (" ", ""),
             (f"{rid:<{REQUEST_ID_WIDTH}}", "dim"), (" ", ""), (str(rec.get("event", "")), "bold")]
    if extras:
        parts += [("  ", ""), (extras, "dim")]
    for key in ("exception", "stack"):
        if rec.get(key):
            parts += [("\n" + str(rec[key]).rstrip(), "red")]
    return parts


def _value(v: object) -> str:
    return v if isinstance(v, str) and v and " " not in v else json.dumps(v)


_ANSI = {"dim": "2", "bold": "1", "red": "31", "green": "32", "yellow": "33", "blue": "34",
         "magenta": "35", "cyan": "36", "bold red": "1;31", "bold white on red": "1;37;41"}


def render_ansi(parts: list[tuple[str, str]], color: bool) -> str:
    """Plain text, or ANSI-coloured text when ``color``."""
    return "".join(f"\x1b[{_ANSI[s]}m{t}\x1b[0m" if color and s in _ANSI else t for t, s in parts)


def make_printer(out: TextIO, as_json: bool, color: bool) -> Callable[[Line], None]:
    """A function printing one line: raw for --json and non-JSON lines, else columns.

    Columns are drawn with ``rich`` when it is installed and colour is on, else ANSI.
    """
    console = None
    if color and not as_json:
        try:
            from rich.console import Console
            from rich.text import Text

            console = Console(file=out, highlight=False, soft_wrap=True, force_terminal=True)
        except ImportError:
            console = None

    def emit(line: Line) -> None:
        if as_json or line.record is None:
            out.write(line.raw + "\n")
        elif console is not None:
            console.print(Text.assemble(*segments(line)))
        else:
            out.write(render_ansi(segments(line), color) + "\n")
        out.flush()

    return emit
