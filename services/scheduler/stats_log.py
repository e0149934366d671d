"""The scheduler's periodic ``engine stats`` log line, as vLLM's engine logs one: over the last interval,
prompt and generation throughput (tokens/s), the requests running and waiting, the verifiers' KV slots in use,
and how speculation paid (mean accepted length, acceptance rate, draft trees verified).

Pure and torch-free: the loop (``loop.py``) hands it the ``wire.Stats`` it sends the gateways each second,
with the core's cumulative token counters, and logs what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass

from common import wire


@dataclass(frozen=True)
class Totals:
    """Cumulative counters at one instant (tokens, trees)."""

    prompt_tokens: int = 0
    generated_tokens: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0


class EngineStatsLog:
    """Every ``interval_s`` seconds (0: never) of the loop's clock, the interval's figures, or None while the
    engine was idle throughout (nothing processed, running or waiting: an idle service logs nothing)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._last: tuple[float, Totals] | None = None

    def observe(self, now: float, stats: wire.Stats, prompt_tokens: int, generated_tokens: int) -> dict | None:
        """``now``: seconds (monotonic); ``stats``: the scheduler's current Stats; ``prompt_tokens`` /
        ``generated_tokens``: the core's cumulative prefilled prompt and committed output tokens. Returns the
        fields of an ``engine stats`` event when an interval has passed and the engine was busy, else None."""
        if self.interval_s <= 0 or (self._last is not None and now - self._last[0] < self.interval_s):
            return None
        totals = Totals(prompt_tokens, generated_tokens, stats.num_drafts, stats.num_draft_tokens,
                        stats.num_accepted_tokens)
        if self._last is None:  # the first sample only starts the interval
            self._last = (now, totals)
            return None
        (start, before), self._last = self._last, (now, totals)
        busy = totals != before or stats.running or stats.waiting
        return _fields(now - start, before, totals, stats) if busy else None


def _fields(seconds: float, before: Totals, after: Totals, stats: wire.Stats) -> dict:
    """The event's fields over ``seconds``: rates in tokens/s, KV use in percent of the verifiers' slots,
    mean accepted length = 1 + accepted / trees (None without trees), acceptance rate = accepted / nodes."""
    drafts = after.drafts - before.drafts
    nodes = after.draft_tokens - before.draft_tokens
    accepted = after.accepted - before.accepted
    verifiers = [w for w in stats.workers if w.role is wire.Role.VERIFIER]
    used, total = sum(w.slots_used for w in verifiers), sum(w.slots_total for w in verifiers)
    return {"interval_s": round(seconds, 1),
            "prompt_tokens_per_s": round((after.prompt_tokens - before.prompt_tokens) / seconds, 1),
            "generation_tokens_per_s": round((after.generated_tokens - before.generated_tokens) / seconds, 1),
            "running": stats.running, "waiting": stats.waiting,
            "kv_slots_used_pct": round(100 * used / total, 1) if total else None,
            "draft_trees": drafts, "mean_accepted_length": round(1 + accepted / drafts, 2) if drafts else None,
            "acceptance_rate": round(accepted / nodes, 3) if nodes else None, "tree_size": stats.tree_size}
