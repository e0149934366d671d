"""Import every module the slim image serves (gateway, scheduler, torch-free common/) and
check that none of them pulled in torch; run by the slim image's build and by CI.

    python docker/check_slim.py        # prints the modules imported; exit 1 on any failure

Any ``ModuleNotFoundError`` here means the slim requirement set (docker/requirements.py
--slim) misses a dependency the gateway or scheduler import.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

PACKAGES = ("services.gateway", "services.scheduler", "common")
MODULES = ("services.worker", "treespec.cli", "treespec.logs", "treespec.logview", "treespec.compose_gpus")
TORCH_ONLY = ("common.modeling",)  # imported by draft/verifier workers only


def slim_modules() -> list[str]:
    """Every module of PACKAGES (minus TORCH_ONLY) plus MODULES, sorted."""
    names = set(MODULES)
    for package in PACKAGES:
        pkg = importlib.import_module(package)
        names.add(package)
        for info in pkgutil.walk_packages(pkg.__path__, package + "."):
            if not info.name.startswith(TORCH_ONLY):
                names.add(info.name)
    return sorted(names)


def main() -> int:
    failed = []
    modules = slim_modules()
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # report every broken module, not just the first
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    if "torch" in sys.modules:
        failed.append("torch was imported by a slim module")
    for line in failed:
        print("FAIL", line, file=sys.stderr)
    print(f"{len(modules) - len(failed)}/{len(modules)} slim modules import without torch")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
