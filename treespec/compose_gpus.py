"""``treespec compose-gpus``: a Compose override giving every draft/verifier replica explicit GPUs.

    treespec compose-gpus --verifier 0,1 --draft 2 --draft 3 -o compose.gpus.yaml
    docker compose -f compose.yaml -f compose.gpus.yaml up -d

Each ``--verifier`` / ``--draft`` is one replica; its value lists the GPUs it gets (indices
as ``nvidia-smi`` numbers them, or ``GPU-<uuid>``). A verifier's list length is its
``tensor_parallel_size`` (the same for every verifier). Why not ``--scale``: a
``count``-based reservation hands every replica the same first GPUs (docker/compose#11863),
so three drafts and the verifier would all share GPU 0.

The override copies the ``draft`` / ``verifier`` services of compose.yaml (anchors resolved,
``${VAR}`` left for Compose) into ``draft-<i>`` / ``verifier-<i>`` services, each reserving
its GPUs by ``device_ids``, and sets ``scale: 0`` on the originals. Torch-free.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

GPU_ID = re.compile(r"^(\d+|GPU-[0-9A-Fa-f-]+|MIG-[0-9A-Za-z/-]+)$")
ROLES = ("verifier", "draft")


@dataclass(frozen=True)
class Replica:
    """One service replica: ``role`` (draft | verifier), ``index`` and its GPU ids."""

    role: str
    index: int
    gpus: tuple[str, ...]

    @property
    def service(self) -> str:
        return f"{self.role}-{self.index}"


def parse_gpus(value: str) -> tuple[str, ...]:
    """``"0,1"`` -> ``("0", "1")``; raises ValueError on an empty, malformed or repeated id."""
    gpus = tuple(g.strip() for g in value.split(","))
    bad = [g for g in gpus if not GPU_ID.match(g)]
    if not gpus or bad:
        raise ValueError(f"bad GPU list {value!r}: use indices like 0,1 or GPU-<uuid> ids")
    if len(set(gpus)) != len(gpus):
        raise ValueError(f"GPU list {value!r} names a GPU twice")
    return gpus


def plan(verifiers: list[str], drafts: list[str]) -> tuple[list[Replica], list[str]]:
    """Replicas for the ``--verifier`` / ``--draft`` values, and warnings about shared GPUs.

    Raises ValueError when there is no verifier or no draft, when verifiers differ in
    tensor-parallel size, or when two verifiers share a GPU (their KV budgets would collide).
    """
    if not verifiers or not drafts:
        raise ValueError("give at least one --verifier and one --draft")
    reps = [Replica("verifier", i, parse_gpus(v)) for i, v in enumerate(verifiers)]
    reps += [Replica("draft", i, parse_gpus(v)) for i, v in enumerate(drafts)]
    tp = {len(r.gpus) for r in reps if r.role == "verifier"}
    if len(tp) != 1:
        raise ValueError(f"every verifier needs the same number of GPUs (tensor parallel size), got {sorted(tp)}")
    owner: dict[str, Replica] = {}
    warnings = []
    for r in reps:
        for gpu in r.gpus:
            prev = owner.setdefault(gpu, r)
            if prev is r:
                continue
            if prev.role == r.role == "verifier":
                raise ValueError(f"GPU {gpu} is given to both {prev.service} and {r.service}")
            warnings.append(f"GPU {gpu} is shared by {prev.service} and {r.service} (they split its memory)")
    return reps, warnings


def device_reservation(gpus: tuple[str, ...]) -> dict:
    """``deploy`` block reserving exactly these NVIDIA GPUs."""
    return {"resources": {"reservations": {"devices": [
        {"driver": "nvidia", "device_ids": list(gpus), "capabilities": ["gpu"]}]}}}


def render(base: dict, replicas: list[Replica]) -> dict:
    """The override document for ``replicas`` given the parsed base compose file ``base``."""
    services: dict = {role: {"scale": 0} for role in ROLES}
    for r in replicas:
        svc = copy.deepcopy(base["services"][r.role])
        svc["deploy"] = device_reservation(r.gpus)
        svc.setdefault("labels", {})["ai.treespec.gpus"] = ",".join(r.gpus)
        if r.role == "verifier":
            svc.setdefault("environment", {})["TREESPEC_TENSOR_PARALLEL_SIZE"] = str(len(r.gpus))
        services[r.service] = svc
    return {"services": services}


def describe(replicas: list[Replica]) -> str:
    """Comment lines: which service gets which GPUs."""
    return "\n".join(f"#   {r.service:<12} GPU {', '.join(r.gpus)}" for r in replicas)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--verifier", action="append", default=[], metavar="GPUS",
                        help="one verifier replica on these GPUs (e.g. 0 or 0,1 for tensor parallel 2); repeat")
    parser.add_argument("--draft", action="append", default=[], metavar="GPUS",
                        help="one draft replica on this GPU (e.g. 2); repeat for more replicas")
    parser.add_argument("--compose-file", default="compose.yaml", help="base file (default: compose.yaml)")
    parser.add_argument("-o", "--output", default="-", help="write here (default: stdout)")


def run(args: argparse.Namespace) -> int:
    try:
        replicas, warnings = plan(args.verifier, args.draft)
        base = yaml.safe_load(Path(args.compose_file).read_text())
    except (ValueError, OSError, yaml.YAMLError) as exc:
        print(f"treespec compose-gpus: {exc}", file=sys.stderr)
        return 2
    for w in warnings:
        print(f"treespec compose-gpus: warning: {w}", file=sys.stderr)
    argv = " ".join(f"--{r.role} {','.join(r.gpus)}" for r in replicas)
    text = (f"# Generated by: treespec compose-gpus {argv}\n"
            f"# Use: docker compose -f {args.compose_file} -f <this file> up -d\n"
            f"{describe(replicas)}\n"
            + yaml.safe_dump(render(base, replicas), sort_keys=False, default_flow_style=False, width=120))
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}:\n{describe(replicas)}", file=sys.stderr)
    return 0
