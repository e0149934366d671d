"""Measurement loops for ``treespec bench``: one prompt at a time, or N concurrent."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from common import wire

# A bf16 verification pass over many tokens rounds differently from one-token decoding;
# measured on the Qwen pair here (scripts/bf16_logit_drift.py: 80 positions) the logits of the
# same position differ by at most 0.28 (median 0.125),
# so a plain-run top-1/top-2 gap at or below this is a near-tie that may legitimately
# flip (see BENCHMARKS.md). fp32 is exact: any divergence counts.
TIE_TOLERANCE = {"float32": 0.0, "bfloat16": 0.5, "float16": 0.1}


@dataclass
class Run:
    """One request's measurement. Times in seconds; ``committed``: tokens per step."""

    tokens: list[int]
    seconds: float
    ttft: float
    committed: list[int] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)  # plain run: top-1 minus top-2 logit per token
    itl: list[float] = field(default_factory=list)  # seconds between streamed chunks / tokens in chunk

    @property
    def decode_tps(self) -> float:
        """Tokens/s after the first token (excludes prefill)."""
        rest = self.seconds - self.ttft
        return (len(self.tokens) - 1) / rest if rest > 0 and len(self.tokens) > 1 else 0.0

    def summary(self) -> dict:
        d = asdict(self)
        d.pop("gaps")
        d["tokens_per_s"] = len(self.tokens) / self.seconds if self.seconds else 0.0
        d["decode_tokens_per_s"] = self.decode_tps
        return d


def run_one(engine, rid: str, prompt: list[int], max_new: int, gaps: bool, ignore_eos: bool = False) -> Run:
    """Generate greedily for one prompt; with ``gaps`` also record logit gaps (plain run)."""
    params = wire.SamplingParams(max_tokens=max_new, logprobs=2 if gaps else None, ignore_eos=ignore_eos)
    start_round = len(engine.stats.committed)
    t0 = time.perf_counter()
    run = Run([], 0.0, 0.0)
    last = t0
    for delta in engine.generate(rid, prompt, params):
        now = time.perf_counter()
        if not run.tokens:
            run.ttft = now - t0
        else:
            run.itl += [(now - last) / len(delta.tokens)] * len(delta.tokens)
        last = now
        run.tokens += delta.tokens
        for lp in delta.logprobs or []:
            run.gaps.append(lp.top[0][1] - lp.top[1][1] if len(lp.top) > 1 else float("inf"))
    run.seconds = time.perf_counter() - t0
    # Decode rounds only: the first round is the prefill, which commits the first token alone.
    run.committed = engine.stats.committed[start_round + 1:]
    return run


def timeline(run: Run, window: int = 128) -> list[dict]:
    """Tokens/s over consecutive windows of ``window`` generated tokens (long outputs)."""
    rows = []
    for start in range(0, len(run.itl) - window + 1, window):
        secs = sum(run.itl[start:start + window])
        rows.append({"tokens": start + window, "tokens_per_s": window / secs if secs else 0.0})
    return rows


def divergence(plain: Run, spec: Run, dtype: str, gap_run: Run | None = None) -> dict | None:
    """First position where spec output differs from plain, classified by the top-1/top-2 logit gap
    there: ``tie`` when gap <= TIE_TOLERANCE[dtype]. The gaps come from ``gap_run`` (an untimed re-run
    of plain with logprobs; default ``plain`` itself). A gap run whose tokens differ from plain's at or
    before that position followed another trajectory and its gap says nothing about plain's: the
    divergence is then left unclassified (``tie`` None, ``gap_run_differs_at`` the position)."""
    n = min(len(plain.tokens), len(spec.tokens))
    pos = next((i for i in range(n) if plain.tokens[i] != spec.tokens[i]), None)
    if pos is None:
        if len(plain.tokens) == len(spec.tokens):
            return None
        pos = n
    source = gap_run or plain
    upto = min(pos + 1, len(plain.tokens))
    off = next((i for i in range(upto) if i >= len(source.tokens) or source.tokens[i] != plain.tokens[i]), None)
    if off is not None:
        return {"position": pos, "gap": None, "tie": None, "gap_run_differs_at": off}
    gap = source.gaps[pos] if pos < len(source.gaps) else float("inf")
    return {"position": pos, "gap": gap, "tie": gap <= TIE_TOLERANCE[dtype]}


def run_concurrent(engine, prompts: list[list[int]], max_new: int, ignore_eos: bool = False) -> dict:
    """Submit all prompts at once to one engine (continuous batching) and run to completion
    (``ignore_eos``: every request generates ``max_new`` tokens, as the HTTP bench's do).

    Returns aggregate tokens/s and p50/p99 inter-token latency (ms) over all requests.
    """
    params = wire.SamplingParams(max_tokens=max_new, ignore_eos=ignore_eos)
    for i, p in enumerate(prompts):
        engine.submit(f"c{i}", p, params)
    t0 = time.perf_counter()
    last = {f"c{i}": t0 for i in range(len(prompts))}
    itl, total, pending = [], 0, len(prompts)
    while pending:
        for d in engine.step():
            now = time.perf_counter()
            itl += [(now - last[d.request_id]) / len(d.tokens)] * len(d.tokens)
            last[d.request_id] = now
            total += len(d.tokens)
            pending -= d.finish is not None
    secs = time.perf_counter() - t0
    itl.sort()
    pct = (lambda q: 1e3 * itl[min(len(itl) - 1, int(q * len(itl)))]) if itl else (lambda q: 0.0)
    return {"concurrency": len(prompts), "tokens": total, "seconds": secs,
            "tokens_per_s": total / secs, "itl_p50_ms": pct(0.5), "itl_p99_ms": pct(0.99)}
