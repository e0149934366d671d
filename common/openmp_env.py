"""OpenMP wait policy for worker processes that take turns on the same CPU cores. Torch-free.

On a CPU deployment the draft worker and the verifier each run a 2-thread OpenMP pool
(torch's libgomp, which the native kernels share) on the same cores, and they take turns:
a draft step, then a verify step. libgomp's default lets a pool's idle threads spin for
``GOMP_SPINCOUNT`` = 300,000 iterations after each parallel region before they sleep (5-10 ms
on a Zen 4 host, ``scripts/omp_spin_time.c``), so when one worker's step ends its threads keep
spinning on the cores the other worker's step, and the messages between them, need.
``GOMP_SPINCOUNT=30000`` (0.5-1 ms there) gives the cores back sooner while still spinning
across the short gaps between the kernels of one step (at 1,000 threads sleep and wake inside
a step: slower than the default; 10,000 was no better than the default).

Measured (BENCHMARKS.md, "OpenMP spin count for the workers", ``scripts/omp_spin_ab.sh``):
one HTTP stream with fixed trees of 8 nodes against the same engine in process, 0.903-0.915 with
libgomp's default in the workers and 0.952-0.955 with 30,000 (2-vCPU Zen 4 host, ABBA order).
The single-process engine (``treespec generate`` / ``bench``) has no second pool to make room
for, so only the worker commands set it.

libgomp reads these variables once, when it is loaded (``import torch``), so
:func:`set_worker_wait_policy` must run before that: ``treespec.cli.main`` calls it for the
``draft`` and ``verifier`` commands, which covers ``treespec up``, Docker Compose and the
Kubernetes manifests (all start workers through the CLI).
"""

from __future__ import annotations

import os
from typing import MutableMapping

WORKER_SPIN_COUNT = "30000"  # libgomp spin iterations before an idle pool thread sleeps
WAIT_POLICY_VARS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")  # either one set by the user wins


def set_worker_wait_policy(environ: MutableMapping[str, str] | None = None) -> str | None:
    """Set ``GOMP_SPINCOUNT`` to :data:`WORKER_SPIN_COUNT` unless the user chose a wait policy.

    ``environ``: the mapping to change (default ``os.environ``, which also reaches this
    process's libgomp when torch is imported afterwards, and its children). Returns the value
    set, or None when ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` was already set (left as is).
    Never raises.
    """
    env = os.environ if environ is None else environ
    if any(env.get(name) for name in WAIT_POLICY_VARS):
        return None
    env["GOMP_SPINCOUNT"] = WORKER_SPIN_COUNT
    return WORKER_SPIN_COUNT


def wait_policy(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """The OpenMP wait settings in effect, for the worker's start log: {variable: value}
    for each of :data:`WAIT_POLICY_VARS` that is set (empty: libgomp's defaults)."""
    env = os.environ if environ is None else environ
    return {name: env[name] for name in WAIT_POLICY_VARS if env.get(name)}
