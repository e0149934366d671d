"""Time the candidate kernels of ``kernels.py`` on a loaded model's own weights at worker
start, pick per (weight format, row bucket), cache the result, install it in the model.

The probe runs layer 0's projections (the shapes every layer shares) and the LM head for
each row bucket of ``kernels.ROW_BUCKETS`` with every kernel that can run them, fastest of
``PROBE_REPS`` runs, scaled to one model pass (a kernel far behind and falling further is not timed
at bigger buckets, ``losing``); it stops early past ``PROBE_BUDGET_S``
(unprobed buckets keep the last choice). The plan is cached as JSON under the model cache
directory, keyed by CPU model, torch version, thread count and the shapes, so a restart on
the same host reads it instead of measuring (config ``kernel_probe = false``: no probe,
default kernels).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import structlog
import torch

from common.host import cpu_model
from common.modeling.kernels import (KERNELS, PROJECTIONS, ROW_BUCKETS, Timings, apply_plan, candidates, choose,
                                     pick, planned, prepare, weight_format, weight_shape)
from common.modeling.native import library

PROBE_REPS = 5  # timed runs per (kernel, rows); the fastest counts
PROBE_BUDGET_S = 20.0  # probing stops after this many seconds (6.5-7.7 s on an idle 2-core Xeon host)
BUSY_SHARE = 0.6  # a probe whose threads got less of the CPU than this (CPU time / wall / threads) is not cached
PLAN_VERSION = 3  # bump when kernels or the key change: old cache files are ignored
HEAD = "lm_head"  # the plan's key for the LM head (its own shape, timed on its own)
HEAD_MAX_ROWS = 32  # the head sees tree-sized batches (prefill needs its last row only): no 128-row probe
# A kernel more than DROP_RATIO x slower than a bucket's fastest, and at least DROP_TREND x further behind than in the
# bucket below, is not timed at bigger buckets (``losing``). On the AVX2-only AMD EPYC Zen 3 host bf16 F.linear ran
# 1.6x / 4.0x / 5.9x / 6.9x / 7.7x / 8.5x the packed kernel at 1 / 4 / 8 / 16 / 32 / 128 rows and the draft's
# dequantizing int4 kernel 22x / 52x / 65x the W4A8 one: timing them past 4 rows took 12 of the main's 20 s and 8 of
# the draft's 10-14 s. Kernels that win at big buckets close in as rows grow (oneDNN on the AMX Xeon host: 4.0x /
# 3.3x / 2.6x / ... / 1.0x at 128 rows), so they are kept.
DROP_RATIO = 3.0
DROP_TREND = 1.2

Timer = Callable[[tuple[str, int, str], Callable[[], object]], float]  # (label, fn) -> ms


@dataclass(frozen=True)
class KernelPlan:
    """The chosen kernels: ``ladders`` format -> ``((max_rows, kernel), ...)``; ``timings``
    ``"format/rows/kernel"`` -> ms per model pass; ``source`` ``probe`` | ``cache`` | ``default`` |
    ``probe-incomplete`` (budget ran out: the buckets it timed, not cached)."""

    ladders: dict[str, tuple[tuple[int, str], ...]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    source: str = "default"
    probe_s: float = 0.0

    def choices(self) -> list[tuple[str, int, str]]:
        """``(format, rows bucket, kernel)`` for every probed bucket (for /metrics)."""
        buckets = sorted({(k.split("/")[0], int(k.split("/")[1])) for k in self.timings})
        return [(fmt, rows, _pick(self.ladders.get(fmt, ()), rows)) for fmt, rows in buckets]

    def metric_timings(self) -> dict[str, float]:
        """``"format/rows/kernel"`` -> ms per model pass, for /metrics' ``worker_kernel_probe_ms``."""
        return dict(self.timings)


def _pick(ladder, rows: int) -> str:
    return pick(ladder, rows) if ladder else "default"


def measure_ms(label: tuple[str, int, str], fn: Callable[[], object]) -> float:
    """Wall time of one run of ``fn`` in ms (``label``: which (format, rows, kernel) it is,
    for fake timers in tests)."""
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def _probe_weights(weights: dict, head) -> dict[str, list]:
    """format (or HEAD) -> the weights timed for it: layer 0's projections, and the head."""
    groups: dict[str, list] = {}
    for name in PROJECTIONS:
        w = weights.get(f"layers.0.{name}.weight")
        if w is not None:
            groups.setdefault(weight_format(w), []).append(w)
    if head is not None:
        groups[HEAD] = [head]
    return groups


def plan_key(weights: dict, head, num_layers: int) -> str:
    """Cache key: CPU model, torch version, threads, buckets, the probed shapes/formats and
    treespec's kernel library (its file name hashes its sources; the W4A8 and bf16 AMX row counts)."""
    groups = _probe_weights(weights, head)
    lib = library()
    native = [lib.path.name, lib.w4a8_amx_rows, lib.bf16_amx_rows] if lib is not None else None
    ident = {"v": PLAN_VERSION, "cpu": cpu_model(), "torch": torch.__version__, "threads": torch.get_num_threads(),
             "buckets": ROW_BUCKETS, "layers": num_layers, "native": native,
             "shapes": {fmt: [[weight_format(w), *weight_shape(w), *candidates(w)] for w in ws] for fmt, ws in groups.items()}}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:24]


def probe_timings(weights: dict, head, num_layers: int, timer: Timer = measure_ms,
                  budget_s: float = PROBE_BUDGET_S, reps: int = PROBE_REPS) -> Timings:
    """ms per model pass for every (format, rows, kernel): layer 0's projections of that
    format times ``num_layers``; the head (format ``HEAD``) once. Inputs are random
    ``[rows, K]`` bf16 (only bf16 and int4 weights have more than one kernel).

    Kernels take turns, each keeps its fastest round (``fastest_of``)."""
    deadline = time.perf_counter() + budget_s
    out: Timings = {}
    for fmt, ws in _probe_weights(weights, head).items():
        scale = 1 if fmt == HEAD else num_layers
        if len(candidates(ws[0])) < 2:
            continue  # nothing to choose
        forms = {k: [prepare(k, w) for w in ws] for k in candidates(ws[0])}
        behind: dict[str, float] = {}  # kernel -> its ratio to the fastest at the last bucket
        for rows in ROW_BUCKETS:
            if time.perf_counter() > deadline or (fmt == HEAD and rows > HEAD_MAX_ROWS):
                break
            xs = [torch.randn(rows, weight_shape(w)[1], dtype=torch.bfloat16) for w in ws]  # bf16 activations
            runs = {k: (lambda fn=KERNELS[k], ops=ops: [fn(x, o, None) for x, o in zip(xs, ops)])
                    for k, ops in forms.items()}
            best = fastest_of({k: ((fmt, rows, k), run) for k, run in runs.items()}, timer, reps)
            out.update({(fmt, rows, k): scale * ms for k, ms in best.items()})
            dropped, behind = losing(best, behind)
            forms = {k: v for k, v in forms.items() if k not in dropped}
    return out


def losing(best: dict[str, float], behind: dict[str, float]) -> tuple[set[str], dict[str, float]]:
    """(kernels not to time at bigger buckets, each kernel's ratio to the fastest now) from one bucket's
    ``best`` (kernel -> ms) and ``behind`` (kernel -> its ratio at the bucket below; empty at the first):
    a kernel over ``DROP_RATIO`` x the fastest whose ratio grew at least ``DROP_TREND`` x since the bucket below."""
    fastest = min(best.values())
    ratios = {k: ms / fastest if fastest > 0 else 1.0 for k, ms in best.items()}
    return {k for k, r in ratios.items() if r > DROP_RATIO and k in behind and r >= DROP_TREND * behind[k]}, ratios


def fastest_of(runs: dict[str, tuple[tuple, Callable[[], object]]], timer: Timer, reps: int) -> dict[str, float]:
    """name -> fastest ms of its run, for ``runs`` name -> (timer label, run): the runs take turns within
    each of ``reps`` rounds after one warm-up round, so a burst of load from other processes hits all of
    them alike."""
    best = {name: float("inf") for name in runs}
    for rep in range(reps + 1):
        for name, (label, run) in runs.items():
            ms = timer(label, run)
            best[name] = best[name] if rep == 0 else min(best[name], ms)
    return best


def host_was_busy(cpu_s: float, wall_s: float) -> bool:
    """True when a probe of ``wall_s`` seconds (at least 1 s: shorter ones are not judged) got less
    than ``BUSY_SHARE`` of its torch threads' CPU time (``cpu_s``, process CPU seconds)."""
    return wall_s >= 1.0 and cpu_s / wall_s / torch.get_num_threads() < BUSY_SHARE


def make_plan(weights: dict, head, num_layers: int, cache: Path | None, timer: Timer = measure_ms,
              budget_s: float = PROBE_BUDGET_S, contended: Callable[[float, float], bool] = host_was_busy
              ) -> KernelPlan:
    """The cached plan for this host and these shapes, else a fresh probe (then cached).

    A probe that ran out of its time budget before every bucket was timed (a starved or slow
    host) uses what it timed (each format's ladder from its timed buckets; a bucket above them
    takes the last timed choice, a format not timed at all its default kernel) for this run only:
    it is not cached, so the next start measures again (``source`` ``probe-incomplete``). The
    defaults are the slowest kernels on the Intel Xeon host (bf16 F.linear 136 ms per pass against
    79 for the packed kernel), so throwing a partial probe away cost more than trusting it. A complete probe whose threads
    were on a CPU less than ``BUSY_SHARE`` of its wall time (process CPU time / wall time /
    torch threads: other processes were running) is used for this run but not cached
    (``source`` ``probe-busy``): a plan timed on a contended host can pick slower kernels, and
    a cached one would keep them on every later start."""
    path = None if cache is None else cache / f"kernels-{plan_key(weights, head, num_layers)}.json"
    if path is not None and path.is_file():
        try:
            raw = json.loads(path.read_text())
            ladders = {f: tuple((int(r), str(k)) for r, k in steps) for f, steps in raw["ladders"].items()}
            return KernelPlan(ladders, {k: float(v) for k, v in raw["timings"].items()}, "cache", raw["probe_s"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # unreadable or stale: measure again and overwrite
    start, cpu_start = time.perf_counter(), time.process_time()
    timings = probe_timings(weights, head, num_layers, timer, budget_s)
    groups = _probe_weights(weights, head)
    shown = {f"{f}/{r}/{k}": round(ms, 3) for (f, r, k), ms in timings.items()}
    probe_s = round(time.perf_counter() - start, 3)
    want = {(f, r) for f, ws in groups.items() if len(candidates(ws[0])) > 1
            for r in ROW_BUCKETS if f != HEAD or r <= HEAD_MAX_ROWS}
    ladders = choose(timings, {f: candidates(ws[0])[0] for f, ws in groups.items()})
    if not want <= {(f, r) for f, r, _ in timings}:
        return KernelPlan(ladders, shown, "probe-incomplete", probe_s)
    busy = contended(time.process_time() - cpu_start, time.perf_counter() - start)
    plan = KernelPlan(ladders, shown, "probe-busy" if busy else "probe", probe_s)
    if path is not None and not busy:
        write_json_atomic(path, asdict(plan))
    return plan


def write_json_atomic(path: Path, data: dict) -> None:
    """Write ``data`` as JSON atomically (temp file + rename): a crash never leaves half a file. A
    cache that cannot be written (a read-only models volume in a container) only costs the next
    start a new probe: logged, never fatal."""
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        structlog.get_logger("kernels").warning("probe result not cached", path=str(path), error=str(exc))


def install(model, enabled: bool, cache: Path | None, timer: Timer = measure_ms) -> KernelPlan:
    """Probe (or read the cached plan) and switch ``model``'s projections and LM head to
    the chosen kernels in place; sets and returns ``model.kernel_plan``. ``enabled`` False
    or a non-CPU model: the default kernels, nothing measured."""
    if model.kernel_plan is not None:
        return model.kernel_plan  # installed already: its weights are wrapped
    plan = KernelPlan()
    if enabled and str(model.device) == "cpu":
        plan = make_plan(model.w, model.head_weight, model.spec.num_layers, cache, timer)
    use_plan(model, plan)
    lib = library() if plan.source != "default" else None
    structlog.get_logger("kernels").info("kernels chosen", source=plan.source, probe_s=plan.probe_s,
                                         packed_kernel=lib.variant if lib else None,
                                         ladders={f: [list(s) for s in steps] for f, steps in plan.ladders.items()},
                                         timings_ms=plan.timings)
    return plan


def use_plan(model, plan: KernelPlan) -> None:
    """Wrap ``model``'s projections (``model.w``, in place) and LM head per ``plan``."""
    apply_plan(model.w, plan.ladders)
    model.head_weight = planned(model.head_weight, plan.ladders.get(HEAD))
    model.kernel_plan = plan
