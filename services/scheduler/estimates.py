"""What the tree policy (``tree_policy.py``) measures and predicts with. Torch-free.

* ``CostCurve``: ms of one forward over T tokens, measured by a worker at start.
* ``AcceptanceTable``: decayed mean accepted length per (tree size, depth), from every verified
  tree pruned counterfactually (EAGLE-2 re-ranking by draft score; exact for greedy decoding);
  a cell decays with its own observations only.
* ``RequestAcceptance``: one request's own table, shrunk toward the engine-wide one.
* ``Calibration``: committed against modelled tokens, per kind of round (speculative or plain)
  and batch bucket.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from common.tree import TokenTree, depths
# DECAY (weight of older rounds) and MIN_WEIGHT (decayed observations an estimate needs) are
# shared by the acceptance table here and the lookup statistics there
from services.scheduler.lookup_policy import DECAY, MIN_WEIGHT

SIZES = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # tree sizes the table and the policy consider
RATE_DECAY = 0.9  # weight of older rounds in Calibration's round count (when a reading counts, and fades)
TOKEN_DECAY = 0.98  # ... and in its factor (as slow as the acceptance table's DECAY)
TOKEN_PRIOR_ROUNDS = 8.0  # rounds' worth of modelled tokens that shrink the token factor toward 1
MIN_RATE_WEIGHT = 2.0  # decayed rounds a measured rate needs before it overrules the cost model
BUCKETS = (1, 2, 4, 8)  # batch sizes at which Calibration's buckets start


@dataclass(frozen=True)
class CostCurve:
    """Measured ms of one forward pass over ``tokens`` tokens; linear in between, linear
    extrapolation past the last point. ``points``: ((tokens, ms), ...) ascending."""

    points: tuple[tuple[int, float], ...]

    def __post_init__(self) -> None:
        if len(self.points) < 2 or any(t <= 0 or ms <= 0 for t, ms in self.points):
            raise ValueError(f"a cost curve needs >= 2 positive (tokens, ms) points, got {self.points}")
        # the points as lists once and each answer memoised: the policy prices ~80 shapes per round,
        # and np.interp per call made a round's choice cost 0.7 ms (2% of a 36 ms w4a8 round)
        object.__setattr__(self, "_xs", [float(t) for t, _ in self.points])
        object.__setattr__(self, "_ys", [float(m) for _, m in self.points])
        object.__setattr__(self, "_memo", {})

    def ms(self, tokens: int) -> float:
        """Predicted ms of one forward over ``tokens`` tokens (>= 1)."""
        memo = self._memo
        if tokens not in memo:
            memo[tokens] = self._interpolate(tokens)
        return memo[tokens]

    def _interpolate(self, tokens: float) -> float:
        """Piecewise-linear ``ms``: flat below the first point, linear past the last."""
        xs, ys = self._xs, self._ys
        if tokens <= xs[0]:
            return ys[0]
        i = min(bisect.bisect_left(xs, tokens), len(xs) - 1)  # xs[i - 1] < tokens <= xs[i], or past the end
        return ys[i - 1] + (ys[i] - ys[i - 1]) * (tokens - xs[i - 1]) / (xs[i] - xs[i - 1])


PRIOR_WEIGHT = 2.0  # decayed observations' worth of the prior that shrinks a sparse cell's mean
# The table counts as measured once this many trees were verified: one tree is one noisy draw, and the
# first explore of a cold 8-stream wave (one sequence's 8-node tree) that accepted nothing made every
# cell 0, so the wave decoded plainly (with lookup grafts) to its end (HTTP, Intel Xeon family 6 model
# 207), while 1-node trees at that batch measured 1.4x plain per round later on
COLD_START_TREES = 3


def pruned_accepts(tree: TokenTree, accepted: list[int], max_depth: int) -> np.ndarray:
    """Accepted draft tokens of ``tree`` pruned to each (size, depth cap) cell: float
    (len(SIZES), max_depth + 1), NaN where the tree is smaller than the size or shallower than the
    cap (and in column 0). Pruning keeps the best ``size`` nodes within the cap, ranked by draft score
    (EAGLE-2 re-ranking, arXiv 2406.16858 §4), and the accepted path survives up to its first pruned
    node: exact for greedy decoding (``accepted``: node indices of the accepted path, root first)."""
    kept = np.full((len(SIZES), max_depth + 1), np.nan)
    n = len(tree)
    d = depths(tree.parents)
    order = np.lexsort((np.arange(n), d, -tree.scores))  # select_best's ranking
    for depth_cap in range(1, min(max_depth, int(d.max()) if n else 0) + 1):
        ranked = [i for i in order if d[i] <= depth_cap]
        rank = {node: r for r, node in enumerate(ranked)}
        for si, size in enumerate(SIZES):
            if size > n:
                break
            count = 0
            for node in accepted:
                if d[node] > depth_cap or rank[node] >= size:
                    break
                count += 1
            kept[si, depth_cap] = count
    return kept


def decayed_add(total: np.ndarray, weight: np.ndarray, kept: np.ndarray) -> None:
    """Add one tree's ``pruned_accepts`` matrix to decayed sums in place: every cell the tree reached (not
    NaN) decays by ``DECAY`` and adds its accepted tokens to ``total`` and 1 to ``weight``; the rest keep theirs."""
    seen = ~np.isnan(kept)
    total[seen] = total[seen] * DECAY + kept[seen]
    weight[seen] = weight[seen] * DECAY + 1


class AcceptanceTable:
    """Decayed mean accepted length of counterfactually pruned trees, per (size, depth).

    Big cells are observed only by big (explore) trees, so their means rest on few rounds; the
    policy picks the cell of highest estimate, so a lucky sparse cell would win (the winner's
    curse: in-process, one explore that accepted 13 tokens made 16x12 trees look best, and they
    then measured half the modelled rate). Each mean is therefore shrunk toward the mean of the
    most-observed cell inside it (no bigger, no deeper, whose accepted length cannot exceed its
    own) with ``PRIOR_WEIGHT`` observations' worth of weight.

    A cell's sums decay (``DECAY``) only when a tree observes it: decayed with every tree, a cell
    that only explore trees (one round in 8) reach kept ~7 observations' weight, and the shrink held
    it below what trees of its shape then accepted, so the policy kept the current best (bf16 main,
    in-process HumanEval, AVX2-only host: (6, 6) estimated 3.40 accepted tokens, (4, 4) 3.04; fixed
    trees of those shapes accepted 3.75 and 2.86, and decoded 12.3 and 11.4 tokens/s)."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.total = np.zeros((len(SIZES), max_depth + 1))
        self.weight = np.zeros((len(SIZES), max_depth + 1))
        self._shrunk: np.ndarray | None = None  # cached estimates, rebuilt after an observation
        self.trees = 0  # verified trees observed (not decayed)

    def observe(self, tree: TokenTree, accepted: list[int]) -> None:
        """Add one verified tree and the node indices the main model accepted."""
        if len(tree):
            self.observe_pruned(pruned_accepts(tree, accepted, self.max_depth))

    def observe_pruned(self, kept: np.ndarray) -> None:
        """Add one verified tree's ``pruned_accepts`` matrix (NaN: a cell the tree did not reach)."""
        self.trees += 1
        self._shrunk = None
        decayed_add(self.total, self.weight, kept)

    def measured(self) -> bool:
        """Whether ``COLD_START_TREES`` trees were verified (every tree observes the 1-node cell, so by
        then it has an estimate: ``MIN_WEIGHT`` is below one observation)."""
        return self.trees >= COLD_START_TREES

    def expected(self, size_index: int, depth: int) -> float | None:
        """Shrunk mean accepted draft tokens (bonus excluded) of a (``SIZES[size_index]``,
        ``depth``) tree; None before ``MIN_WEIGHT`` decayed observations."""
        if self.weight[size_index, depth] < MIN_WEIGHT:
            return None
        if self._shrunk is None:
            self._shrunk = self._shrink()
        return float(self._shrunk[size_index, depth])

    def estimates(self) -> np.ndarray:
        """Every cell's ``expected`` at once: float (len(SIZES), max_depth + 1), NaN where it is None."""
        if self._shrunk is None:
            self._shrunk = self._shrink()
        return np.where(self.weight >= MIN_WEIGHT, self._shrunk, np.nan)

    def _shrink(self) -> np.ndarray:
        """(mean * weight + prior * PRIOR_WEIGHT) / (weight + PRIOR_WEIGHT) per cell, prior = the
        mean of the most-observed cell at or below it in size and depth (ties: the same size
        first, then the nearest depth, so a table observed evenly keeps its plain means).

        Ties going to the largest size index, then the largest depth, make the prior's cell the
        lexicographic maximum of (weight, size index, depth) over the rectangle below, a prefix
        maximum: one pass over the cells, 0.2 ms where 132 argmax calls over sub-rectangles took 1.0
        (rebuilt after every verified tree: 2% of a 45 ms w4a8 round; Zen 2 host)."""
        mean = np.divide(self.total, self.weight, out=np.zeros_like(self.total), where=self.weight > 0)
        out = np.zeros_like(mean)
        weight = self.weight.tolist()
        best: list[list[tuple[float, int, int]]] = []  # [si][depth]: the prior's cell's key
        for si in range(len(SIZES)):
            row = [(-1.0, 0, 0)]
            for depth in range(1, self.max_depth + 1):
                key = max((weight[si][depth], si, depth), row[depth - 1], best[si - 1][depth] if si else row[0])
                row.append(key)
                prior = mean[key[1], key[2]]
                out[si, depth] = (self.total[si, depth] + PRIOR_WEIGHT * prior) / (self.weight[si, depth] + PRIOR_WEIGHT)
            best.append(row)
        return out


# Observations' worth of the engine-wide table in one request's estimate: after this many of its own
# trees a request's acceptance weighs half (Spec-Bench translation, priced by a table learned on other
# prompts, drafted trees at 0.79x plain for whole requests on an AVX2-only host; with this reading, 16
# Spec-Bench prompts measured the same as without it, 1.13x against 1.12x over 5 + 5 runs, BENCHMARKS.md)
REQUEST_PRIOR_WEIGHT = 4.0


class RequestAcceptance:
    """One request's own ``AcceptanceTable`` sums (decayed per cell by ``DECAY`` as there), read as
    its cells' means shrunk toward the engine-wide estimates (empirical Bayes, ``REQUEST_PRIOR_WEIGHT``
    observations of prior): how one request's text (a translation, a code completion) has been
    drafted so far is evidence on its next trees that the requests before it are not."""

    def __init__(self) -> None:
        self.total: np.ndarray | None = None  # float (len(SIZES), max_depth + 1), allocated at the first tree
        self.weight: np.ndarray | None = None

    def observe(self, kept: np.ndarray) -> None:
        """Add one of the request's verified trees (its ``pruned_accepts`` matrix)."""
        if self.total is None:
            self.total, self.weight = np.zeros_like(kept), np.zeros_like(kept)
        decayed_add(self.total, self.weight, kept)

    def blend(self, table: np.ndarray) -> np.ndarray:
        """This request's estimates: (own total + prior x table) / (own weight + prior) per cell, the
        engine-wide ``table`` (``AcceptanceTable.estimates``, NaN: unmeasured, kept NaN) alone before
        the request's first tree; float, ``table``'s shape."""
        if self.total is None:
            return table
        return (self.total + REQUEST_PRIOR_WEIGHT * table) / (self.weight + REQUEST_PRIOR_WEIGHT)


class Calibration:
    """Committed against modelled tokens of the rounds the policy chose, for speculative and for plain
    rounds: the ``factor`` that scales a kind's modelled rate, so that trees whose accepted paths keep
    falling short of the acceptance table's estimate for their shape (acceptance drifting with the
    text, a table that learned on other prompts) lose to plain decoding.

    Only tokens: the ms side of a round is the cost corrections' job (``pricing.py``: measured over
    curve ms per (batch, rows) of the verifier and (batch, depth) of the draft). A time factor here
    compared each round with the price its shape had after those corrections had learned from the
    same round, so it read their lag and the host's noise: at 8 HTTP streams on an Intel Xeon host it
    read 0.74-0.88 for trees and 1.10-1.16 for plain at a wave's start while the trees had committed
    1.2-1.5x plain's tokens per ms, and the batch decoded plainly (BENCHMARKS.md, "Calibration by
    tokens only"). Committed over modelled tokens is decayed by ``TOKEN_DECAY`` per round of the kind
    and shrunk toward 1 by ``TOKEN_PRIOR_ROUNDS`` rounds' worth of modelled tokens: one tree's accepted
    length is noisy (a 6-node tree modelled at 5.2 tokens commits 1 to 7) and the acceptance table
    already learns from every tree.

    A plain round commits what is modelled (one token per sequence), so the plain factor stays near 1.0;
    plain rounds are observed to count them (``measured``: the policy probes plain decoding until a
    bucket has its plain verify price) and, at batch 1, to age the speculative reading, so a stale one
    fades. A reading counts once its kind has ``MIN_RATE_WEIGHT`` rounds, decayed by ``RATE_DECAY`` per
    round.
    One reading per kind and batch bucket (1, 2-3, 4-7, 8+ sequences); rounds with prompt-lookup
    grafts are not observed (``TreePolicy.observe_round``)."""

    def __init__(self) -> None:
        self.weights: dict[tuple[int, bool], float] = {}  # (bucket, speculative) -> rounds, RATE_DECAY
        self.tokens: dict[tuple[int, bool], list[float]] = {}  # ... -> [tokens, model tokens, w], TOKEN_DECAY

    @staticmethod
    def bucket(batch: int) -> int:
        """Batch bucket: 1, 2 (2-3), 4 (4-7) or 8 (8 and more sequences): the largest of ``BUCKETS`` <= batch."""
        return max(b for b in BUCKETS if b <= max(1, batch))

    def observe(self, batch: int, speculative: bool, tokens: float, model_tokens: float) -> None:
        """One round of ``batch`` sequences committed ``tokens`` where the model expected ``model_tokens``
        (a round without a model, ``model_tokens`` <= 0, is ignored)."""
        if model_tokens <= 0:
            return
        b = self.bucket(batch)
        for kind in {speculative, True} if b == 1 else (speculative,):
            # one sequence: the speculative reading ages with plain rounds too, so a stale one
            # (speculation measured short once, then never chosen again) fades below MIN_RATE_WEIGHT
            # after ~15 plain rounds and the model decides again (in-process HumanEval: prompts
            # decoded plainly to the end after one poor reading). The plain reading ages with plain
            # rounds only: ageing it with every round made every 4th round a plain probe. Larger
            # batches keep theirs: re-trying speculation there makes every draft catch up (HTTP, 8
            # streams: 0.78x)
            if (b, kind) in self.weights:
                self.weights[(b, kind)] *= RATE_DECAY
        self.weights[(b, speculative)] = self.weights.get((b, speculative), 0.0) + 1
        t, mt, tw = (x * TOKEN_DECAY for x in self.tokens.get((b, speculative), [0.0] * 3))
        self.tokens[(b, speculative)] = [t + tokens, mt + model_tokens, tw + 1]

    def measured(self, batch: int, speculative: bool) -> bool:
        """Whether this kind has ``MIN_RATE_WEIGHT`` decayed rounds in ``batch``'s bucket."""
        return self.weights.get((self.bucket(batch), speculative), 0.0) >= MIN_RATE_WEIGHT

    def factor(self, batch: int, speculative: bool) -> float:
        """Committed / modelled tokens in ``batch``'s bucket, shrunk: (committed + prior) / (modelled +
        prior), the prior ``TOKEN_PRIOR_ROUNDS`` x the mean modelled tokens per round. Before
        ``MIN_RATE_WEIGHT`` rounds there, the nearest smaller measured bucket's factor (the model's error
        carries over to a neighbouring batch size better than no correction), else 1.0."""
        b = self.bucket(batch)
        for bucket in sorted((k for k in BUCKETS if k <= b), reverse=True):
            if self.measured(bucket, speculative):
                t, mt, tw = self.tokens[(bucket, speculative)]
                prior = TOKEN_PRIOR_ROUNDS * mt / tw
                return (t + prior) / (mt + prior)
        return 1.0
