"""structlog setup: one JSON object per line on stdout, for every service. Torch-free.

Every event carries ``service`` and ``replica`` (bound by :func:`setup_logging`) plus
``timestamp``, ``level`` and ``event``; code that has a request in hand binds
``request_id``. The standard library's ``logging`` records (the model loader,
transformers, ...) and Python ``warnings`` become the same JSON events (``logger`` names
their source), and progress bars (tqdm, huggingface_hub, transformers' weight loading)
are turned off, so a service log holds JSON lines only (a crash's traceback aside). The
launcher redirects each service's stdout to ``<log_dir>/<service>-<replica>.log``;
``treespec logs`` reads those lines back.
"""

from __future__ import annotations

import logging as stdlib_logging
import os
import sys

import structlog

LEVELS = {"debug": stdlib_logging.DEBUG, "info": stdlib_logging.INFO,
          "warning": stdlib_logging.WARNING, "error": stdlib_logging.ERROR}
# Environment switches that keep progress bars out of service logs (read by tqdm and the
# Hugging Face libraries when a bar is created).
NO_PROGRESS_BARS = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def setup_logging(service: str, replica: str = "0", level: str = "info", stream=None):
    """Configure structlog for this process and return a logger bound to service/replica.

    ``level``: debug | info | warning | error (raises KeyError otherwise). Also routes the
    standard library's ``logging`` records and ``warnings.warn`` messages to the same
    stream as JSON events, and turns progress bars off (environment of this process and
    its children).
    """
    stream = sys.stdout if stream is None else stream
    quiet_progress_bars()
    stamp = structlog.processors.TimeStamper(fmt="iso", utc=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            stamp,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    _route_stdlib(stream, LEVELS[level], stamp)
    structlog.contextvars.bind_contextvars(service=service, replica=replica)  # module loggers too
    return structlog.get_logger().bind(service=service, replica=replica)


def quiet_progress_bars() -> None:
    """Turn progress bars off for this process and its children (environment switches).

    tqdm reads ``TQDM_DISABLE`` when it is imported, so service commands call this before
    importing anything heavy (``treespec.cli.main``); ``setup_logging`` calls it too.
    """
    for name, value in NO_PROGRESS_BARS.items():
        os.environ.setdefault(name, value)


def _route_stdlib(stream, level: int, stamp) -> None:
    """The root logger writes JSON through structlog's ProcessorFormatter; warnings go to it."""
    handler = stdlib_logging.StreamHandler(stream)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.contextvars.merge_contextvars, structlog.stdlib.add_log_level,
                           structlog.stdlib.add_logger_name, stamp],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]))
    root = stdlib_logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level)
    stdlib_logging.captureWarnings(True)


def route_library_logging() -> None:
    """Send transformers' log records through the root logger (JSON) instead of its own
    stderr handler, and turn its progress bars off. For the processes that load models
    (draft, verifier); a no-op without transformers."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return
    hf_logging.disable_default_handler()
    hf_logging.enable_propagation()
    hf_logging.disable_progress_bar()


def round_event(log, round_no: int, draft_ms: float, verify_ms: float, accepted: list[int], **extra) -> None:
    """Log one round's timings (ms) and per-sequence accepted lengths (tokens committed);
    ``extra`` fields are added as they are."""
    log.info("round", round=round_no, draft_ms=round(draft_ms, 3), verify_ms=round(verify_ms, 3),
              batch=len(accepted), accepted=accepted, **extra)
