"""``treespec draft``: run one draft worker (DEALER to the scheduler)."""

from __future__ import annotations

from common import wire
from services.worker import add_worker_args, run_worker


def configure(parser) -> None:
    add_worker_args(parser)


def run(args) -> int:
    from common.modeling.budget import memory_usage
    from services.draft.worker import build_draft
    return run_worker(args, wire.Role.DRAFT, build_draft, memory_usage)
