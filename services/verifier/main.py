"""``treespec verifier``: run one tree verifier (DEALER to the scheduler)."""

from __future__ import annotations

from common import wire
from services.worker import add_worker_args, run_worker


def configure(parser) -> None:
    add_worker_args(parser)


def run(args) -> int:
    from common.modeling.budget import memory_usage
    from services.verifier.worker import build_verifier
    return run_worker(args, wire.Role.VERIFIER, build_verifier, memory_usage)
