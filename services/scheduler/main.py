"""``treespec scheduler``: run the scheduler service (binds the ROUTER). Torch-free."""

from __future__ import annotations

import signal

import zmq

from common.cli_args import add_config_args, config_or_report
from common.logging import setup_logging


def configure(parser) -> None:
    add_config_args(parser)


def run(args) -> int:
    """Serve until SIGTERM/SIGINT; 2 on a config error, 1 when the address cannot be bound."""
    from services.scheduler.loop import SchedulerLoop
    cfg = config_or_report(args, "scheduler")
    if cfg is None:
        return 2
    log = setup_logging("scheduler", "0", cfg.log_level)
    try:
        loop = SchedulerLoop(cfg, log)
    except zmq.ZMQError as exc:
        log.error("cannot bind", address=cfg.scheduler_bind or cfg.scheduler_address, error=str(exc))
        return 1
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: loop.stop())
    loop.run()
    log.info("scheduler stopped")
    return 0
