"""Which sequences' speculative tokens shorten the batch's run, when no request takes a freed slot.

The tree policy's rate, committed tokens per ms, values every token the same. That holds while a
slot freed by a finished request is filled at once: a request waits, or clients send their next
request as soon as one ends. When neither happens (a closed wave: ``treespec bench --url
--concurrency 8`` over 8 prompts), the batch runs until its longest request ends: a token for a
request that ends before another anyway only frees a slot nobody takes, and on a memory-bound
verifier a smaller batch costs about the same per round (2-core host: batch 5, 82.7 ms; batch 8,
78-90 ms). Measured (``scripts/batch_round_trace.py``: 8 HumanEval prompts, 128 tokens, EOS
ignored, AMD EPYC Zen 5): rounds with lookup grafts committed more tokens per ms than plain rounds
(0.093 against 0.065), but the tokens went to the requests that copy from their prompt (9 tokens a
round), which then finished first; the wave took 128 rounds as plain decoding did, with grafted
rounds 1.4x dearer: 0.90x plain.

So a sequence is on the *critical path* when its expected remaining tokens (``lengths.remaining``)
are the batch's largest. Unless a request waits or clients were seen refilling (``Refills``):

* the others' lookup tokens count at ``OFF_PATH_VALUE`` (0) in the graft decision
  (``LookupStats.nodes``): they graft only on their lookup explore rounds. The cost is that request's
  latency (it ends with the batch instead of early), the gain the batch's throughput. Over HTTP at
  8 streams a worth of 0.5 still grafted in 16-28 of 124-126 rounds per run (a copying request gains
  8 tokens for 8 rows), a worth of 0 in 11-13 of 125-127 (explores, the critical path);
* a draft tree, one shape for the whole batch, is judged by what the critical path accepts: the
  tree policy's expected accepted tokens times the critical sequences' lowest ``DraftFit`` (how
  well the draft predicts a sequence relative to its batch). In HTTP 8-stream waves, rounds with
  tree or lookup nodes committed 0.065-0.069 tokens per worker-ms against the plain rounds'
  0.046-0.052, and the waves still took 124-126 rounds to plain's 128-129: the slowest request is
  slowest because the draft and lookup predict it worst.

Torch-free.
"""

from __future__ import annotations

OFF_PATH_VALUE = 0.0  # worth of a lookup token to a request off the critical path: its slot will idle
REFILL_ROUNDS = 4  # rounds after a finish within which an admitted request counts as a refill
FIT_DECAY = 0.9  # weight of older rounds in a sequence's draft fit
FIT_PRIOR = 2.0  # tokens of batch-mean acceptance a fit starts from (a few rounds outweigh it)


class Refills:
    """Whether clients refill freed slots: a request that finished while others still ran, followed
    within ``REFILL_ROUNDS`` round starts by an admitted request, sets ``refilling``; such a finish
    with no admission in that time clears it, and so does a batch that empties. The latest such
    finish decides; False before any (a first wave is treated as closed until its clients show
    otherwise)."""

    def __init__(self, within: int = REFILL_ROUNDS) -> None:
        self.within = within
        self.rounds_since: int | None = None  # round starts since an unresolved finish, None: none pending
        self.refilling = False

    def finished(self, others_running: bool) -> None:
        """Requests ended in a round; ``others_running``: the batch still has requests (a slot came
        free mid-run). A batch that emptied starts over: the next arrival begins a new batch, not a
        refill, and that batch counts as closed until its clients refill (over HTTP, the 2-stream
        runs' refills had carried into the next level's 8-stream wave)."""
        if not others_running:
            self.rounds_since, self.refilling = None, False
        elif self.rounds_since is None:
            self.rounds_since = 0

    def round_started(self, admitted: int) -> None:
        """A round begins after ``admitted`` requests moved from the queue into the batch."""
        if self.rounds_since is None:
            return
        if admitted > 0:
            self.refilling, self.rounds_since = True, None
            return
        self.rounds_since += 1
        if self.rounds_since > self.within:
            self.refilling, self.rounds_since = False, None


class DraftFit:
    """How well the draft model predicts one sequence relative to the rest of its batch: decayed
    draft-accepted tokens of its trees over the batch's mean in the same rounds, shrunk toward 1
    by ``FIT_PRIOR`` tokens (1.0 before any round)."""

    def __init__(self) -> None:
        self.own = self.batch = 0.0

    def observe(self, own: int, batch_mean: float) -> None:
        """A round where this sequence's draft tree had ``own`` tokens accepted and the batch's
        trees (same shape) ``batch_mean`` on average (tokens)."""
        self.own = self.own * FIT_DECAY + own
        self.batch = self.batch * FIT_DECAY + batch_mean

    def age(self) -> None:
        """A round where this sequence committed tokens without a draft tree of the round's shape (a plain
        round, a deferred or explorer sequence): its text moved on unobserved, so the readings decay by
        ``FIT_DECAY`` and the fit drifts back toward 1. Without it, a fit read in a wave's first tree rounds
        outlived them: in process at 8 streams one cold 4x4 round left the critical sequence at 0.56, the
        batch decoded plainly, no tree observed it again, and the wave stayed plain to its end."""
        self.own *= FIT_DECAY
        self.batch *= FIT_DECAY

    def ratio(self) -> float:
        """Own over batch-mean accepted tokens (> 0)."""
        return (self.own + FIT_PRIOR) / (self.batch + FIT_PRIOR)


def observe_fits(accepted: list[tuple[DraftFit, int]]) -> None:
    """One round's (fit, draft-accepted tokens) per sequence that drafted the round's shape (an
    explore tree is left out) update each fit; fewer than two sequences say nothing."""
    if len(accepted) < 2:
        return
    mean = sum(n for _, n in accepted) / len(accepted)
    for fit, own in accepted:
        fit.observe(own, mean)


def on_path(remaining: list[float], refilled: bool) -> list[bool] | None:
    """Per sequence, from their expected remaining tokens (one per sequence, >= 0), whether it is on
    the critical path (the largest remaining, ties included); None when every token counts:
    ``refilled`` (a request waits or clients refill) or a lone sequence."""
    if refilled or len(remaining) < 2:
        return None
    top = max(remaining)
    return [r >= top for r in remaining]


def critical_fit(remaining: list[float], fits: list[float], refilled: bool) -> float:
    """The lowest draft fit (``DraftFit.ratio``) among the sequences on the critical path
    (``on_path``), 1.0 when every token counts; ``remaining`` and ``fits``: one per sequence, same order."""
    path = on_path(remaining, refilled)
    return 1.0 if path is None else min(f for f, on in zip(fits, path) if on)


def path_values(remaining: list[float], refilled: bool) -> list[float]:
    """Worth of one lookup token to each sequence of a batch: 1.0 on the critical path (``on_path``)
    and for every sequence when every token counts, else ``OFF_PATH_VALUE``."""
    path = on_path(remaining, refilled)
    return [1.0] * len(remaining) if path is None else [1.0 if on else OFF_PATH_VALUE for on in path]


__all__ = ["OFF_PATH_VALUE", "REFILL_ROUNDS", "DraftFit", "Refills", "critical_fit", "observe_fits", "on_path",
           "path_values"]
