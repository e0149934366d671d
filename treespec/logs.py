"""``treespec logs``: follow and filter the services' JSON logs. Torch-free.

Sources are the files ``<log_dir>/<service>-<replica>.log`` written by ``treespec up``,
given files or directories, or ``-`` for standard input
(``docker compose logs -f | treespec logs -``; the ``draft-1  | `` prefixes name each line's
container). Files are merged in
timestamp order; standard input is streamed in arrival order. Parsing, filtering and
merging live in :mod:`treespec.logview`, formatting in :mod:`treespec.logformat`.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path

from treespec.logformat import make_printer
from treespec.logview import FileMerger, Filter, parse_level, parse_since, stream


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sources", nargs="*", metavar="SOURCE",
                        help="log files or directories, or - for stdin (default: the log directory)")
    parser.add_argument("--log-dir", default=None,
                        help="directory of `treespec up` logs (default: $TREESPEC_LOG_DIR or ./logs)")
    parser.add_argument("--service", action="append", default=[],
                        help="only these services, e.g. draft or draft-1 (repeatable, comma-separated)")
    parser.add_argument("--level", default=None, help="minimum level: debug, info, warning, error")
    parser.add_argument("--request-id", default=None,
                        help="only records of this request: its id, or its first characters as the log view shows them")
    parser.add_argument("--since", default=None, help="only records newer than 10m, 2h, 1d or an ISO time")
    parser.add_argument("-f", "--follow", action="store_true", help="keep reading as files grow")
    parser.add_argument("--json", action="store_true", help="print the matching JSON lines unchanged")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto")


def build_filter(args: argparse.Namespace) -> Filter:
    """The Filter for parsed arguments; ValueError with the flag's name for bad values."""
    services = frozenset(s.strip() for v in args.service for s in v.split(",") if s.strip())
    return Filter(services=services,
                  min_level=parse_level(args.level) if args.level else 0,
                  request_id=args.request_id,
                  since=parse_since(args.since) if args.since else None)


def run(args: argparse.Namespace) -> int:
    try:
        flt = build_filter(args)
    except ValueError as exc:
        print(f"treespec logs: {exc}", file=sys.stderr)
        return 2
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty()
                                       and "NO_COLOR" not in os.environ)
    emit = make_printer(sys.stdout, args.json, color)
    sources = args.sources or [args.log_dir or os.environ.get("TREESPEC_LOG_DIR", "logs")]
    try:
        if sources == ["-"]:
            for line in stream(sys.stdin, flt):
                emit(line)
            return 0
        if "-" in sources:
            print("treespec logs: - (stdin) cannot be combined with files", file=sys.stderr)
            return 2
        paths = [Path(s) for s in sources]
        missing = [str(p) for p in paths if not p.exists()]
        if missing and not args.follow:
            print(f"treespec logs: no such file or directory: {', '.join(missing)}", file=sys.stderr)
            return 1
        merger = FileMerger(paths, flt)
        if args.follow:
            merger.follow(emit, threading.Event())
        else:
            for line in merger.poll(final=True):
                emit(line)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        sys.stderr.close()  # e.g. piped into head
    return 0


def _main() -> int:  # pragma: no cover - `python -m treespec.logs`
    parser = argparse.ArgumentParser(prog="treespec logs")
    configure(parser)
    return run(parser.parse_args())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main())
