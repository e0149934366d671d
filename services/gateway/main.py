"""``treespec gateway``: serve the OpenAI-compatible HTTP API in front of the scheduler."""

from __future__ import annotations

import argparse
import asyncio

from common.cli_args import add_config_args, config_or_report
from common.control_keys import keys_dir
from common.logging import setup_logging
from services.gateway.app import make_app
from services.gateway.backend import ZmqBackend
from services.gateway.server import serve
from services.probes import default_replica


def configure(parser: argparse.ArgumentParser) -> None:
    add_config_args(parser)
    parser.add_argument("--host", help="address to listen on (config host)")
    parser.add_argument("--replica", default=None,
                        help="replica label in logs and metrics (default: the hostname, i.e. the container or pod)")


def run(args: argparse.Namespace) -> int:
    """Serve HTTP until SIGTERM/SIGINT; 2 on a config error (named on stderr)."""
    cfg = config_or_report(args, "gateway")
    if cfg is None:
        return 2
    replica = default_replica(args.replica)
    log = setup_logging("gateway", replica, cfg.log_level)
    backend = ZmqBackend(cfg.scheduler_address, replica, cfg.heartbeat_interval_s,
                         cfg.heartbeat_timeout_s, keys_dir(cfg))
    app = make_app(cfg, backend, replica=replica)
    host = args.host or cfg.host
    log.info("gateway listening", host=host, port=cfg.port, scheduler=cfg.scheduler_address,
             curve=bool(keys_dir(cfg)))
    if not keys_dir(cfg):
        log.warning("insecure control plane: plaintext to the scheduler (insecure_control_plane = true)")
    # handler_cancellation (in serve): a client that disconnects cancels its handler,
    # which aborts the request at the scheduler.
    asyncio.run(serve(app, host, cfg.port, cfg))
    log.info("gateway stopped")
    return 0
