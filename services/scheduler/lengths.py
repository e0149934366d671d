"""How many more tokens a running request will generate, learned from the requests that finished.

The tree policy spreads a draft's catch-up (prefilling the tokens the draft model has not seen yet)
over the rounds a request has left. ``max_tokens`` is only a ceiling: a chat or RAG answer often
stops after a few dozen tokens of a 512-token budget, and pricing the catch-up over the budget made
the policy pay a long draft prefill for an answer that was about to end.

Estimate (the mean residual life of the empirical length distribution): with ``L_1..L_m`` the
output lengths of the last ``WINDOW`` finished requests and ``n`` tokens generated so far,

    remaining(n) = mean(L_i - n  for L_i > n),   capped by the request's own max_tokens - n,

used only when at least ``MIN_SURVIVORS`` of them ran past ``n``; otherwise (nothing learned yet, or
a request already longer than almost every one seen) the cap, i.e. the old behaviour. Requests that
stopped at ``max_tokens`` count with that length (a lower bound of what they would have run), so a
workload that always fills its budget keeps estimating the budget. A request cut off by a small
``max_tokens`` thus counts as a short answer for requests with larger budgets (no censoring model).

The estimate also gates the tree policy's explore rounds (``EXPLORE_MIN_REMAINING``): while the
finished answers are shorter than that, a batch drafts no explore tree; it explores again as
longer requests finish and enter the window. Torch-free.
"""

from __future__ import annotations

from collections import deque

WINDOW = 64  # finished requests remembered
MIN_SURVIVORS = 4  # finished requests longer than n needed before their residual is trusted


class OutputLengths:
    """Output lengths (tokens) of recently finished requests, and the expected rest of a running one."""

    def __init__(self, window: int = WINDOW, min_survivors: int = MIN_SURVIVORS) -> None:
        self.lengths: deque[int] = deque(maxlen=window)
        self.min_survivors = min_survivors

    def observe(self, tokens: int) -> None:
        """A request finished (EOS, stop, or its max_tokens) after ``tokens`` output tokens."""
        self.lengths.append(max(0, int(tokens)))

    def remaining(self, generated: int, cap: int) -> float:
        """Expected further tokens of a request that has ``generated`` tokens and may generate at
        most ``cap`` more (>= 0): the mean residual of the finished lengths above ``generated``,
        at most ``cap``; ``cap`` itself while fewer than ``min_survivors`` of them are longer."""
        cap = max(0, cap)
        longer = [n - generated for n in self.lengths if n > generated]
        if len(longer) < self.min_survivors:
            return float(cap)
        return min(float(cap), sum(longer) / len(longer))


__all__ = ["OutputLengths", "WINDOW", "MIN_SURVIVORS"]
