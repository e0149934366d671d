"""Up to how many KV columns treespec's C++ attention beats SDPA on this host, measured at start.

``build._exact_attention`` routes a CPU model's small passes (draft levels, the main model's
verify passes) to ``attention.ExactAttention``, which also opens the one-call native layer loop
(``native_forward.py``). Which of it and SDPA is faster depends on the context length and on the
CPU: a 4-row draft level after 2,048 KV columns took 17.4 ms with the C++ kernel and 18.4 with SDPA
on the 2-core AMD EPYC Zen 5 host (BENCHMARKS.md), while on the 2-core Intel Xeon host SDPA won past
about 1,000 tokens (20.8 vs 22.4 ms). A fixed column limit is right on one of them only, so the
worker times, for one sequence's ``rows`` rows of its own model after each column count of
``COLUMN_LADDER``, the attention of one pass (every layer's call and nothing else) with both kernels
(random queries and KV contents: the cost does not depend on them), and one whole pass per row count,
and keeps the C++ kernel up to the last count before SDPA's attention first wins by more than
``SDPA_MARGIN`` of that whole pass (``choose_max_cols``; a win of SDPA is timed twice, ``_confirmed``; a
row count never gets a lower limit than a bigger one, ``monotone_limits``). Timing the attention alone
is what makes the choice hold: on the AVX2-only AMD EPYC Zen 3 host one whole 4-16-row main pass
varied by 28-220 ms between 8 interleaved runs (128-180 ms at 4 rows after 512 columns), several times
the 1-15 ms by which the two kernels' attention differed, while the attention alone varied by 2-26 ms
and the C++ kernel's was the faster at every shape timed (8 rows after 512 columns: 9.9 against 13.7 ms).
Those limits are
``DecoderModel.exact_limits``; a pass of several sequences also keeps the limits the model was built
with (``exact_batch_limits``): SDPA pads every segment of a batch to the longest one, which a
one-sequence probe does not see (7 decodes + one 17-row tree after 1,500 tokens: 471 ms with SDPA,
198 with the C++ kernel). The result is cached as JSON next to the matmul kernel plans
(``kernel_probe.py``), keyed by CPU model, torch version, threads, the model's shapes, its kernels and
the native library, so a restart reads it.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import structlog
import torch

from common.host import cpu_model
from common.modeling.attention import ExactAttention, tree_attention_for
from common.modeling.kernel_probe import (Timer, fastest_of, host_was_busy, measure_ms,
                                          write_json_atomic)

COLUMN_LADDER = (512, 1024, 2048, 4096)  # KV columns before a timed pass
PROBE_REPS = 5  # timed runs per (rows, columns, kernel) of the attention alone after one warm-up; the fastest counts
PASS_REPS = 2  # timed whole passes per row count after one warm-up (the scale of SDPA_MARGIN only)
# past this the probe gives up (whole passes timed with both kernels took 10 s for the bf16 1.5B main at 1, 16 and
# 32 rows on the 2-core AMD EPYC Zen 5 host and 43-52 s at 1, 4, 8, 16 and 32 rows on the AVX2-only Zen 3 host;
# the attention alone takes less); out of time: limits as built for that run, and the next start probes again
PROBE_BUDGET_S = 80.0
ATTENTION_VERSION = 4  # bump when the probe or its key change: old cache files are ignored
# SDPA takes a row count's passes from the C++ kernel only when its attention is faster by this share of a whole
# pass: the C++ kernel also runs the pass's layer loop in one native call (10-20 ms cheaper than the Python loop
# at 4-8 rows on the Zen 3 host), and a smaller win is inside a shared host's drift. On that host a probe that
# timed whole passes routed 2-4-row verify passes to SDPA on 138 against 145 ms, 7-27 ms slower each.
SDPA_MARGIN = 0.1

Limits = tuple[tuple[int, "int | None"], ...]  # ((max rows, max KV columns or None: any), ...), DecoderModel.exact_limits


@dataclass(frozen=True)
class AttentionPlan:
    """``limits``: ``DecoderModel.exact_limits`` as measured (per row count timed, the C++ kernel up to
    that many KV columns; None: any, 0: never); ``timings``: ``"rows/columns/exact"`` and
    ``"rows/columns/sdpa"`` -> ms of one pass; ``source``: ``probe`` | ``cache`` | ``probe-busy`` (timed
    while other processes ran: used for this run, not cached) | ``probe-incomplete`` (out of time:
    limits as built, not cached) | ``default`` (nothing timed: the model's positions are shorter than
    every column count; limits as built)."""

    limits: Limits
    timings: dict[str, float] = field(default_factory=dict)
    source: str = "probe"
    probe_s: float = 0.0

    def choices(self) -> list[tuple[str, int, str]]:
        """``("attention", rows, kernel)`` per row limit for /metrics' ``worker_kernel_info``: kernel
        ``exact`` (any context), ``exact_up_to_<N>_columns`` or ``sdpa``."""
        def label(cols):
            return "exact" if cols is None else "sdpa" if cols == 0 else f"exact_up_to_{cols}_columns"
        return [("attention", rows, label(cols)) for rows, cols in self.limits]

    def metric_timings(self) -> dict[str, float]:
        """``"attention/rows/kernel@columns"`` -> ms per pass, for /metrics' ``worker_kernel_probe_ms``."""
        out = {}
        for key, ms in self.timings.items():
            rows, cols, kernel = key.split("/")
            out[f"attention/{rows}/{kernel}@{cols}"] = ms
        return out


def choose_max_cols(timings: dict[str, float], rows: int, ladder: tuple[int, ...] = COLUMN_LADDER) -> int | None:
    """The column limit of the C++ kernel for passes of ``rows`` rows from ``timings``
    (``"rows/cols/exact"``, ``"rows/cols/sdpa"`` -> ms of a pass's attention; ``"rows/<first cols>/pass"`` -> ms
    of a whole pass, the margin's scale): the last count of ``ladder`` (ascending) up to
    which SDPA never won (``sdpa_wins``); None when it won at no count (no limit), 0 when SDPA won
    already at the first."""
    limit: int | None = None
    whole = timings.get(f"{rows}/{ladder[0]}/pass")
    for cols in ladder:
        exact, sdpa = timings.get(f"{rows}/{cols}/exact"), timings.get(f"{rows}/{cols}/sdpa")
        if exact is None or sdpa is None or sdpa_wins(exact, sdpa, whole):  # not timed (the probe stopped): as a loss
            return limit if limit is not None else 0
        limit = cols
    return None  # won at every count: no limit


def monotone_limits(limits: Limits) -> Limits:
    """``limits`` (ascending row counts) with each row count's column limit raised to the largest limit of
    any bigger row count (None: any columns, above every number; 0: none). SDPA's blocked kernel gains on
    the C++ kernel as rows grow (it shares each key block among more rows), so a row count whose limit
    sits below a bigger one's was timed in a slow moment: on the AVX2-only AMD EPYC Zen 3 host one start
    sent 16-row passes past 1,024 columns to SDPA on one 426 against 382 ms timing while 32-row passes kept
    the kernel at every count and the kernel was faster at 16 rows in every other measurement."""
    out, best = [], 0
    for rows, cols in reversed(limits):
        best = None if cols is None or best is None else max(best, cols)
        out.append((rows, best))
    return tuple(reversed(out))


def sdpa_wins(exact_ms: float, sdpa_ms: float, pass_ms: float | None = None) -> bool:
    """Whether SDPA beat the C++ kernel by more than ``SDPA_MARGIN`` of ``pass_ms`` (ms of one whole pass;
    None: of ``sdpa_ms``). ``exact_ms``, ``sdpa_ms``: ms of a pass's attention with each kernel."""
    return exact_ms - sdpa_ms > SDPA_MARGIN * (sdpa_ms if pass_ms is None else pass_ms)


def probe_timings(model, rows: tuple[int, ...], ladder: tuple[int, ...] = COLUMN_LADDER, timer: Timer = measure_ms,
                  reps: int = PROBE_REPS, budget_s: float = PROBE_BUDGET_S) -> tuple[dict[str, float], bool]:
    """(timings, complete). For each ``r`` in ``rows``: ms of one whole ``model.forward`` of one sequence's ``r``
    rows (causal) after the first column count of ``ladder`` (ascending), C++ kernel (key ``"r/cols/pass"``),
    then after each column count the ms of that pass's attention alone (every layer's call), with the C++
    kernel (``"r/cols/exact"``) and with SDPA (``"r/cols/sdpa"``); a row count stops at the first count where
    SDPA wins (``sdpa_wins``: the limit is known). ``complete`` is False when ``budget_s`` ran out first.
    Timer labels: ``(arm, r, str(cols))``, arm ``pass`` | ``exact`` | ``sdpa``.
    ``model.exact_lib`` must be set; ``model.exact_limits`` is restored afterwards. Uses a one-slot KV
    cache of its own (``max(ladder) + max(rows)`` positions: 2 x layers x positions x kv_heads x head_dim
    x dtype bytes, 0.12 GB for Qwen2.5-1.5B in bf16), freed on return."""
    ladder = usable_ladder(model, rows, ladder)
    if not ladder:
        return {}, True
    deadline = time.perf_counter() + budget_s
    cache = model.new_cache(1, max(ladder) + max(rows))
    slot = cache.allocate()
    cache.k.normal_()
    cache.v.normal_()
    saved = model.exact_limits
    out: dict[str, float] = {}
    try:
        for r in rows:
            if time.perf_counter() > deadline:
                return out, False
            model.exact_limits = None  # the whole pass as the C++ kernel runs it (its native layer loop)
            whole = fastest_of({"pass": (("pass", r, str(ladder[0])), _pass(model, cache, slot, ladder[0], r))},
                               timer, PASS_REPS)["pass"]
            model.exact_limits = saved
            out[f"{r}/{ladder[0]}/pass"] = pass_ms = round(whole, 3)
            for cols in ladder:
                if time.perf_counter() > deadline:
                    return out, False
                best = _confirmed(model, cache, slot, (r, cols), timer, reps, pass_ms)
                out.update({f"{r}/{cols}/{arm}": ms for arm, ms in best.items()})
                if sdpa_wins(best["exact"], best["sdpa"], pass_ms):
                    break
    finally:
        model.exact_limits = saved
    return out, True


def _confirmed(model, cache, slot: int, shape: tuple[int, int], timer: Timer, reps: int,
               pass_ms: float) -> dict[str, float]:
    """``_time_both``, rounded as stored (``choose_max_cols`` compares the stored values); where SDPA
    wins (``sdpa_wins``; the row count stops there) timed once more, each kernel's fastest of both rounds
    counting. On the 2-core AMD EPYC Zen 4 host one probe timed a 16-row main pass at 280 ms with the C++ kernel
    against 195 with SDPA (and 326 ms at 32 rows) and routed 2-16-row passes to SDPA for good; re-probed
    this way it kept the C++ kernel there (168 vs 206 ms), and HumanEval (10 prompts, four runs in
    mirrored order) went from 1.51-1.53x plain with the first limits to 1.66-1.83x (BENCHMARKS.md)."""
    best = {arm: round(ms, 3) for arm, ms in _time_both(model, cache, slot, shape, timer, reps).items()}
    if sdpa_wins(best["exact"], best["sdpa"], pass_ms):
        again = _time_both(model, cache, slot, shape, timer, reps)
        best = {arm: min(ms, round(again[arm], 3)) for arm, ms in best.items()}
    return best


def _time_both(model, cache, slot: int, shape: tuple[int, int], timer: Timer, reps: int) -> dict[str, float]:
    """Fastest ms of one pass's attention (``shape`` = (rows, columns)) with the C++ kernel (``exact``) and
    with SDPA (``sdpa``), taking turns (``kernel_probe.fastest_of``)."""
    rows, cols = shape
    return fastest_of({arm: ((arm, rows, str(cols)), _attention(model, cache, slot, cols, rows, arm == "exact"))
                       for arm in ("exact", "sdpa")}, timer, reps)


def _causal_mask(model, cols: int, rows: int) -> torch.Tensor:
    """``[1, 1, rows, cols + rows]`` bool: every cached column, then the new rows causally."""
    mask = torch.ones(1, 1, rows, cols + rows, dtype=torch.bool)
    mask[0, 0, :, cols:] = torch.tril(torch.ones(rows, rows, dtype=torch.bool))
    return mask.to(model.device)


def _pass(model, cache, slot: int, cols: int, rows: int):
    """A closure running one forward of ``rows`` causal rows after ``cols`` (random) KV columns."""
    tokens = torch.randint(0, model.spec.vocab_size, (1, rows), device=model.device)
    positions = torch.arange(cols, cols + rows, device=model.device).unsqueeze(0)  # [1, rows]
    mask = _causal_mask(model, cols, rows)

    def run():
        cache.lengths[slot] = cols
        model.forward(tokens, positions, cache, [slot], mask)
    return run


def _attention(model, cache, slot: int, cols: int, rows: int, exact: bool):
    """A closure running the attention of one such forward, every layer's call and nothing else, as the
    forward would: ``ExactAttention`` built once (``exact``) or SDPA (``tree_attention_for``); random
    queries ``[1, rows, heads, head_dim]`` in the model's dtype."""
    kvh = cache.k.shape[3]
    q = torch.randn(1, rows, kvh * (model.spec.num_heads // model.spec.num_kv_heads), model.spec.head_dim,
                    dtype=model.dtype, device=model.device)
    mask = _causal_mask(model, cols, rows)

    @torch.inference_mode()
    def run():
        cache.lengths[slot] = cols
        attend = (ExactAttention(model.exact_lib, mask, [slot], cache.max_len) if exact
                  else tree_attention_for(mask, cache, [slot]))
        for layer in range(model.spec.num_layers):
            attend(q, cache, layer, [slot], mask)
    return run


def usable_ladder(model, rows: tuple[int, ...], ladder: tuple[int, ...]) -> tuple[int, ...]:
    """The column counts of ``ladder`` a pass of ``max(rows)`` rows fits after (the model's positions).
    Raises ValueError for empty or unsorted ``rows`` or ``ladder``."""
    for name, seq in (("rows", rows), ("ladder", ladder)):
        if not seq or list(seq) != sorted(set(seq)) or seq[0] < 1:
            raise ValueError(f"attention probe {name} must be ascending positive counts, got {seq!r}")
    return tuple(c for c in ladder if c + max(rows) <= model.spec.max_positions)


def plan_key(model, rows: tuple[int, ...], ladder: tuple[int, ...]) -> str:
    """Cache key: CPU model, torch version, threads, the model's shapes and dtype, its weight types and
    kernel plan, whether its native layer loop runs (they decide the pass), the native library's file and
    AMX row counts, ``rows`` and the usable ``ladder``."""
    s, lib, plan = model.spec, model.exact_lib, model.kernel_plan
    native = [getattr(getattr(lib, "path", None), "name", None), getattr(lib, "w4a8_amx_rows", None),
              getattr(lib, "bf16_amx_rows", None), model.native is not None]
    ident = {"v": ATTENTION_VERSION, "cpu": cpu_model(), "torch": torch.__version__, "threads": torch.get_num_threads(),
             "shape": [s.num_layers, s.hidden_size, s.intermediate_size, s.num_heads, s.num_kv_heads, s.head_dim,
                       str(model.dtype)],
             "weights": sorted({type(w).__name__ for w in model.w.values()}),
             "kernels": None if plan is None else {f: [list(x) for x in st] for f, st in plan.ladders.items()},
             "native": native, "rows": list(rows), "ladder": list(usable_ladder(model, rows, ladder))}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:24]


def measure(model, rows: tuple[int, ...], cache_dir: Path | None, ladder: tuple[int, ...] = COLUMN_LADDER,
            timer: Timer = measure_ms, budget_s: float = PROBE_BUDGET_S) -> AttentionPlan:
    """The cached plan for this host and model, else a fresh probe (cached unless the host was busy, or
    the model's kernel plan was not a settled one: a busy or incomplete kernel probe is redone at the
    next start, under another key). ``rows``: the row counts to time, ascending; a pass longer than the
    last keeps SDPA. A probe that ran past ``budget_s`` keeps the model's limits as built for this run
    (``probe-incomplete``, not cached: the next start measures again); unlike the kernel probe it keeps
    none of the row counts it finished. Raises ValueError for bad ``rows`` / ``ladder``."""
    path = None if cache_dir is None else cache_dir / f"attention-{plan_key(model, rows, ladder)}.json"
    if path is not None and path.is_file():
        try:
            raw = json.loads(path.read_text())
            limits = monotone_limits(tuple((int(r), None if c is None else int(c)) for r, c in raw["limits"]))
            return AttentionPlan(limits, {k: float(v) for k, v in raw["timings"].items()}, "cache", float(raw["probe_s"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass  # unreadable or stale: measure again and overwrite
    start, cpu_start = time.perf_counter(), time.process_time()
    timings, complete = probe_timings(model, rows, ladder, timer, budget_s=budget_s)
    wall = time.perf_counter() - start
    if not timings or not complete:  # positions shorter than every count, or out of time: limits as built
        return AttentionPlan(model.exact_limits, timings, "default" if complete else "probe-incomplete", round(wall, 3))
    busy = host_was_busy(time.process_time() - cpu_start, wall)
    used = usable_ladder(model, rows, ladder)  # as probe_timings ran them
    limits = monotone_limits(tuple((r, choose_max_cols(timings, r, used)) for r in rows))
    plan = AttentionPlan(limits, timings, "probe-busy" if busy else "probe", round(wall, 3))
    settled = model.kernel_plan is None or model.kernel_plan.source in ("probe", "cache", "default")
    if path is not None and not busy and settled:
        write_json_atomic(path, asdict(plan))
    return plan


def install(model, rows: tuple[int, ...], enabled: bool, cache_dir: Path | None,
            timer: Timer = measure_ms) -> AttentionPlan | None:
    """Measure (or read) and set ``model.exact_limits`` and ``model.attention_plan`` where the model
    attends by the C++ kernel within limits (``exact_lib`` set, ``exact_limits`` not None), in bf16 (the
    CPU serving dtype; fp32, for exactness checks, keeps its limits: a quantized 1.5B main in fp32 took
    six minutes to probe), ``rows`` is not empty and ``enabled`` (config ``kernel_probe``); logs the
    choice. Otherwise the model's limits stay as built and None is returned."""
    if not (rows and enabled and model.exact_lib is not None and model.exact_limits is not None
            and model.dtype == torch.bfloat16):
        return None
    plan = measure(model, rows, cache_dir, timer=timer)
    model.exact_limits, model.attention_plan = plan.limits, plan
    structlog.get_logger("kernels").info("attention chosen", source=plan.source, probe_s=plan.probe_s,
                                         exact_limits=[list(x) for x in plan.limits], timings_ms=plan.timings)
    return plan


__all__ = ["AttentionPlan", "COLUMN_LADDER", "Limits", "SDPA_MARGIN", "choose_max_cols", "install", "measure",
           "monotone_limits", "plan_key", "probe_timings", "sdpa_wins", "usable_ladder"]
