"""structlog setup: one JSON object per line on stdout, for every service. Torch-free.

Every event carries ``service`` and ``replica`` (bound by :func:`setup_logging`) plus
``timestamp``, ``level`` and ``event``; code that has a request in hand binds
``request_id``. The launcher redirects each service's stdout to
``<log_dir>/<service>-<replica>.log``; ``treespec logs`` reads those lines back.
"""

from __future__ import annotations

import logging as stdlib_logging
import sys

import structlog

LEVELS = {"debug": stdlib_logging.DEBUG, "info": stdlib_logging.INFO,
          "warning": stdlib_logging.WARNING, "error": stdlib_logging.ERROR}


def setup_logging(service: str, replica: str = "0", level: str = "info", stream=None):
    """Configure structlog for this process and return a logger bound to service/replica.

    ``level``: debug | info | warning | error (raises KeyError otherwise). Also routes the
    standard library's ``logging`` records (e.g. from the model loader) to the same stream.
    """
    stream = sys.stdout if stream is None else stream
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    stdlib_logging.basicConfig(stream=stream, level=LEVELS[level],
                               format='{"event": "%(message)s", "logger": "%(name)s", "level": "%(levelname)s"}')
    structlog.contextvars.bind_contextvars(service=service, replica=replica)  # module loggers too
    return structlog.get_logger().bind(service=service, replica=replica)


def round_event(log, round_no: int, draft_ms: float, verify_ms: float, accepted: list[int], **extra) -> None:
    """Log one round's timings (ms) and per-sequence accepted lengths (tokens committed);
    ``extra`` fields are added as they are."""
    log.info("round", round=round_no, draft_ms=round(draft_ms, 3), verify_ms=round(verify_ms, 3),
              batch=len(accepted), accepted=accepted, **extra)
