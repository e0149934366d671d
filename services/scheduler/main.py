"""``treespec scheduler``: run the scheduler service (binds the ROUTER). Torch-free."""

from __future__ import annotations

import signal

import zmq

from common.cli_args import add_config_args, config_or_report
from common.logging import setup_logging


def configure(parser) -> None:
    add_config_args(parser)
    parser.add_argument("--replica", default="",
                        help="replica label in logs and metrics (default: the hostname, i.e. the container or pod)")


def run(args) -> int:
    """Serve until SIGTERM/SIGINT; 2 on a config error, 1 when the address (or the probe
    port, config ``metrics_port``) cannot be bound."""
    from services.probes import default_replica
    from services.scheduler.loop import SchedulerLoop
    cfg = config_or_report(args, "scheduler")
    if cfg is None:
        return 2
    replica = default_replica(args.replica)
    log = setup_logging("scheduler", replica, cfg.log_level)
    try:
        loop = SchedulerLoop(cfg, log)
    except zmq.ZMQError as exc:
        log.error("cannot bind", address=cfg.scheduler_bind or cfg.scheduler_address, error=str(exc))
        return 1
    try:
        probes = _probes(cfg, loop, replica, log)
    except OSError as exc:
        log.error("cannot bind probe port", port=cfg.metrics_port, error=str(exc))
        loop.close()
        return 1
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: loop.stop())
    try:
        loop.run()
    finally:
        if probes is not None:
            probes.close()
    log.info("scheduler stopped")
    return 0


def _probes(cfg, loop, replica: str, log):
    """The /metrics /livez /readyz server (None when ``metrics_port`` is 0).

    /readyz is 200 once the ROUTER is bound and the loop runs, even before any worker
    joined: workers reach the scheduler through its (Kubernetes) Service, which lists
    only ready pods, so readiness must not wait for them. ``treespec:scheduler_ready``
    says whether requests can be served.
    """
    if not cfg.metrics_port:
        return None
    from services.probes import ProbeServer, SchedulerCollector, new_registry
    registry = new_registry()
    registry.register(SchedulerCollector(replica, loop.driver.ready, loop.worker_counts, lambda: len(loop.gateways)))
    probes = ProbeServer(cfg.host, cfg.metrics_port, registry, ready=lambda: loop.serving,
                         live=loop.alive).start()
    log.info("probes listening", host=cfg.host, port=probes.port)
    return probes
