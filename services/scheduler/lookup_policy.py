"""Whether prompt-lookup nodes pay for the verify rows they add (issue 15).

Prompt-lookup candidates (``common/lookup.py``) cost no draft compute, only verify rows.
``LookupStats`` records, per sequence-round where lookup was offered (found a match or not),
how many nodes it added (a, often 0) and how many of those the main model accepted beyond
the draft tree (g); where a match is found the tree policy grafts k of its chain (k <= the
budget), the k that maximizes
    (E + 1 + q k) / verify_ms(B, B * (n + 1 + k)),  q = g / a,  if that beats k = 0
(E: expected accepted draft tokens of the round's draft tree of n nodes, B sequences), i.e.
while the extra accepted tokens pay for the extra verified rows; g counts at ``OFF_PATH_VALUE`` (0)
for a sequence off the batch's critical path while no request takes a freed slot (``makespan.py``).

``verify_ms`` is the verifier's start-up cost curve (one sequence, T tokens) corrected by
``CostCorrection``: measured over curve ms for rounds of about the same batch and rows (the tree
policy's model uses the same corrected cost). The curve
alone is far off for big batches: on the 2-core host a batch of 8 with ~35 rows (8 plain rows
plus lookup chains) took 560 ms where 8 plain rows took 130 ms; the curve predicted about
2x, so lookup was grafted at a loss (2026-12-01 HTTP run).

The model can still be wrong (the acceptance it assumes drifts with the text, and at a batch
of 8 on 2 cores every verified row already costs about 1/8 of a round), so ``RoundRates``
checks it: committed tokens per ms of rounds that grafted lookup nodes against rounds that
did not, per batch bucket; lookup that measured slower is not grafted (except on explore
rounds).

All of it is per sequence (``SeqLookup``, one per request): how much a text copies from its
prompt differs far more between requests than how well the draft model predicts it (a
summary copies, a one-line answer does not). The engine-wide ``LookupStats`` is each
sequence's prior (``SEQ_PRIOR_WEIGHT`` sequence-rounds' worth), so a new request starts from
what lookup did lately and its own rounds soon outweigh it. With one engine-wide gate, the
first prompts of a Spec-Bench run that measured lookup slower kept it off for later
summarization prompts (32 lookup tokens proposed in one run, 982 in another: 1.35x vs 1.60x).
Torch-free.
"""

from __future__ import annotations

from typing import Callable

DEFAULT_LOOKUP_ACCEPT = 0.5  # per-node acceptance assumed for lookup nodes before any is measured
MIN_LOOKUP_ACCEPT = 0.02  # floor of the per-node estimate (keeps log-scores finite)
DECAY = 0.98  # weight of older rounds in acceptance means (here and in estimates.AcceptanceTable)
MIN_WEIGHT = 0.5  # decayed observations an acceptance mean needs before it is used
COST_DECAY = 0.9  # weight of older rounds in a measured/curve ratio
MIN_COST_WEIGHT = 1.0  # decayed rounds a ratio needs before it corrects the curve
MIN_RATE_WEIGHT = 1.5  # decayed rounds of each kind (two) before measured rates overrule the model
SEQ_PRIOR_WEIGHT = 2.0  # sequence-rounds' worth of the engine-wide means in a sequence's own estimate
LOOKUP_EXPLORE_EVERY = 8  # a sequence's rounds between grafts made whatever the model says (lookup explores)
LOOKUP_EXPLORE_BACKOFF = 5  # ... each explore while lookup does not pay doubles that gap, up to 2^5 x
LOOKUP_EXPLORE_COST = 0.25  # an explore grafts the nodes whose rows add at most this share to the verify pass ...
LOOKUP_EXPLORE_MIN_NODES = 2  # ... but at least this many (a chain's first tokens tell whether the text copies)


class LookupStats:
    """Decayed per-sequence-round sums (over rounds where lookup was offered, zeros included) of
    lookup nodes added beyond the draft tree and of those accepted, whose ratio is the per-node
    acceptance ``nodes`` prices a graft with; plus lifetime counters of lookup tokens proposed and
    accepted."""

    def __init__(self) -> None:
        self.added = self.gained = self.weight = 0.0
        self.proposed = self.accepted = 0  # tokens on lookup chains / accepted ones (metrics)

    def observe(self, proposed: int, accepted: int, added: int, gained: int) -> None:
        """One sequence-round: ``proposed`` lookup-chain tokens (``accepted`` of them
        accepted), ``added`` nodes new to the tree (``gained`` of them accepted)."""
        self.proposed += proposed
        self.accepted += accepted
        self.added = self.added * DECAY + added
        self.gained = self.gained * DECAY + gained
        self.weight = self.weight * DECAY + 1

    @property
    def measured(self) -> bool:
        return self.weight >= MIN_WEIGHT

    def _sums(self, prior: LookupStats | None) -> tuple[float, float, float]:
        """(added, gained, weight): own decayed sums plus ``prior``'s means at ``SEQ_PRIOR_WEIGHT``
        (when ``prior`` is given and measured)."""
        if prior is None or not prior.measured:
            return self.added, self.gained, self.weight
        k = SEQ_PRIOR_WEIGHT / prior.weight
        return self.added + k * prior.added, self.gained + k * prior.gained, self.weight + SEQ_PRIOR_WEIGHT

    def accept_rate(self, prior: LookupStats | None = None, floor: float = MIN_LOOKUP_ACCEPT) -> float:
        """Accepted / added lookup nodes, own rounds shrunk toward ``prior`` (the engine-wide
        stats; None: own only), at least ``floor``; DEFAULT_LOOKUP_ACCEPT before MIN_WEIGHT rounds."""
        added, gained, weight = self._sums(prior)
        if weight < MIN_WEIGHT or added <= 0:
            return DEFAULT_LOOKUP_ACCEPT
        return max(floor, gained / added)

    def nodes(self, verify_ms: Callable[[int], float], batch: int, size: int, expected: float,
              prior: LookupStats | None = None, value: float = 1.0, cap: int = 0) -> int:
        """How many lookup nodes (0..``cap``) to graft where a prompt-lookup match is found: the
        count k of highest expected tokens/ms, (E + 1 + value q k) / verify_ms(B (n + 1 + k)), ties
        to the larger; 0 when none beats grafting nothing. q: accepted per grafted node (as
        ``accept_rate``: this sequence's, shrunk toward ``prior``; ``DEFAULT_LOOKUP_ACCEPT`` before
        any is measured; without its floor), taken for every sequence of the batch (a batch
        grafting together pays the rows of all); ``verify_ms(rows)``: ms of one verify pass of
        ``rows`` tokens at this batch; ``value``: worth of one gained token (1; less off the batch's
        critical path, ``makespan.path_values``). Priced per match, not per round: averaged over
        the rounds that found none, a graft looked 0.3 rows (the verify curve's cheap first rows)
        where each cost 8 (w4a8 main, Zen 2 host: 1 / 2 / 9 rows 30 / 36 / 137 ms, ~1 token
        gained); a kinked curve now grafts the cheap first nodes only (there: 1 node at q ~ 0.2)."""
        if cap <= 0:
            return 0
        q = self.accept_rate(prior, floor=0.0)  # no floor: a graft that never gains never pays
        rows = batch * (size + 1)
        rate = [(expected + 1 + value * q * k) / verify_ms(rows + batch * k) for k in range(cap + 1)]
        best = max(range(1, cap + 1), key=lambda k: (rate[k], k))
        return best if rate[best] >= rate[0] else 0


class SeqLookup:
    """One sequence's lookup state: its own ``LookupStats`` (the engine-wide ones are its prior),
    its ``RoundRates`` (rounds that grafted its lookup nodes against rounds that did not), and its
    explore schedule (``explore_due``)."""

    def __init__(self) -> None:
        self.stats = LookupStats()
        self.rates = RoundRates()
        self.rounds = 0  # rounds lookup was decided for this sequence
        self.next_explore = LOOKUP_EXPLORE_EVERY  # the round of its next graft made whatever it pays
        self.misses = 0  # explores since lookup last paid (each doubles the gap to the next)

    def explore_due(self) -> bool:
        """Count a round; True on an explore round: every ``LOOKUP_EXPLORE_EVERY``-th, the gap doubling
        after each explore made while lookup does not pay (up to ``2 ** LOOKUP_EXPLORE_BACKOFF``), since
        a graft over a big batch can cost several plain rounds."""
        self.rounds += 1
        if self.rounds < self.next_explore:
            return False
        gap = LOOKUP_EXPLORE_EVERY * 2 ** min(self.misses, LOOKUP_EXPLORE_BACKOFF)
        self.next_explore, self.misses = self.rounds + gap, self.misses + 1
        return True

    def graft(self, verify_ms: Callable[[int], float], batch: int, size: int, expected: float,
              prior: LookupStats, value: float, cap: int) -> int:
        """Lookup nodes (0..``cap``) this sequence grafts this round onto its tree of ``size`` nodes
        (``expected`` accepted draft tokens) in a batch of ``batch``: ``LookupStats.nodes`` on its
        stats (``prior``: the engine-wide ones; ``value``: a gained token's worth) while its rounds
        with grafts did not measure slower (``rates``); otherwise ``explore_nodes`` on its explore
        rounds (``explore_due``), else 0. ``verify_ms(rows)``: corrected ms of a verify pass at this batch."""
        explore = self.explore_due()
        if not self.rates.loses(batch):
            nodes = self.stats.nodes(verify_ms, batch, size, expected, prior=prior, value=value, cap=cap)
            if nodes:
                self.misses = 0
                return nodes
        return explore_nodes(verify_ms, batch, size, cap) if explore else 0


def explore_nodes(verify_ms: Callable[[int], float], batch: int, size: int, cap: int) -> int:
    """Lookup nodes of an explore graft: the most, up to ``cap``, whose verify rows cost (``verify_ms(rows)``,
    ms at this batch) at most ``LOOKUP_EXPLORE_COST`` over the round's pass of ``batch`` trees of ``size``
    nodes, and at least ``LOOKUP_EXPLORE_MIN_NODES``. On a batch that is already compute-bound (8 streams
    on 2 cores: 8 plain rows 130 ms, ~35 rows 560 ms) a full graft nearly doubles the round for a sequence
    whose lookup measured no gain; a chain's first tokens still show whether the text began to copy."""
    rows = batch * (size + 1)
    limit = verify_ms(rows) * (1 + LOOKUP_EXPLORE_COST)
    nodes = cap
    while nodes > LOOKUP_EXPLORE_MIN_NODES and verify_ms(rows + nodes) > limit:
        nodes -= 1
    return min(cap, nodes)


def _pow2(n: int) -> int:
    """The power of two at or above ``n`` (>= 1): the bucket of a batch or a row count."""
    return 1 << max(0, int(n) - 1).bit_length()


class CostCorrection:
    """Measured ms over the cost curve's ms, decayed, per (batch, size) bucket (powers of two):
    the correction the tree policy applies to a curve. For the verifier ``rows`` is the tokens
    verified in the round; for the draft it is the tree depth (level passes: each pays per-level
    work the curve, one forward over T tokens, leaves out: logits, top-k, the tree mask)."""

    def __init__(self) -> None:
        self.ratios: dict[tuple[int, int], list[float]] = {}  # bucket -> [sum of ratios, weight]
        self._factors: dict[tuple[int, int], float] = {}  # factor() per (batch, rows) until the next observe

    def observe(self, curve_ms: float, batch: int, rows: int, ms: float) -> None:
        """One pass: ``rows`` (tokens or levels) of ``batch`` sequences took ``ms`` (curve: ``curve_ms``)."""
        if curve_ms <= 0 or ms <= 0 or rows < 1:
            return
        key = (_pow2(batch), _pow2(rows))
        s, w = self.ratios.get(key, (0.0, 0.0))
        self.ratios[key] = [s * COST_DECAY + ms / curve_ms, w * COST_DECAY + 1]
        self._factors.clear()

    def factor(self, batch: int, rows: int) -> float:
        """Measured / curve ms in this bucket, else interpolated (in log2 rows) between the same batch
        bucket's nearest measured rows buckets below and above, else the one below (the ratio grows
        with rows), else its smallest one above (which
        prices a plain round high until its own bucket is measured, a few rounds). A batch
        bucket with none measured takes the nearest smaller measured batch bucket's factor (the
        ratio grows with the batch too: the curve is one sequence's; at 8 streams a first round
        priced by the bare curve bet the whole batch on trees that measured 2.6x slower than
        plain); 1.0 when no smaller batch has ``MIN_COST_WEIGHT`` rounds."""
        factor = self._factors.get((batch, rows))
        if factor is None:  # the policy asks for ~100 shapes per round: look up once
            factor = self._factors[(batch, rows)] = self._lookup(_pow2(batch), _pow2(rows))
        return factor

    def _lookup(self, batch_bucket: int, rows_bucket: int) -> float:
        """``factor`` for power-of-two buckets, from the measured ratios."""
        buckets = {k[0] for k, (_, w) in self.ratios.items() if w >= MIN_COST_WEIGHT and k[0] <= batch_bucket}
        if not buckets:
            return 1.0
        b = max(buckets)
        measured = sorted(k[1] for k, (_, w) in self.ratios.items() if k[0] == b and w >= MIN_COST_WEIGHT)
        below = [m for m in measured if m <= rows_bucket]
        above = [m for m in measured if m > rows_bucket]
        lo = self._ratio(b, below[-1] if below else measured[0])
        if not below or not above or below[-1] == rows_bucket:
            return lo
        # between two measured buckets: interpolated in log2(rows); the one below alone priced the
        # row counts under an expensive measured bucket as cheap as the cheap one (a graft of 7
        # lookup nodes per sequence at batch 8 at the 8-row ratio where 72 rows measured 4x dearer)
        t = (rows_bucket.bit_length() - below[-1].bit_length()) / (above[0].bit_length() - below[-1].bit_length())
        return lo + t * (self._ratio(b, above[0]) - lo)

    def _ratio(self, batch_bucket: int, rows_bucket: int) -> float:
        """The decayed mean measured/curve ratio of one bucket."""
        s, w = self.ratios[(batch_bucket, rows_bucket)]
        return s / w


class RoundRates:
    """Decayed committed tokens and worker ms of rounds with and without grafted lookup nodes,
    per batch bucket (powers of two)."""

    def __init__(self) -> None:
        self.sums: dict[tuple[int, bool], list[float]] = {}  # (bucket, grafted) -> [tokens, ms, weight]

    def observe(self, batch: int, grafted: bool, tokens: int, ms: float) -> None:
        """One decode round of ``batch`` sequences: ``tokens`` committed in ``ms``."""
        if ms <= 0:
            return
        key = (_pow2(batch), grafted)
        t, m, w = self.sums.get(key, (0.0, 0.0, 0.0))
        self.sums[key] = [t * COST_DECAY + tokens, m * COST_DECAY + ms, w * COST_DECAY + 1]

    def rate(self, batch: int, grafted: bool) -> float | None:
        """Tokens per ms in ``batch``'s bucket; None before ``MIN_RATE_WEIGHT`` rounds."""
        t, m, w = self.sums.get((_pow2(batch), grafted), (0.0, 0.0, 0.0))
        return t / m if w >= MIN_RATE_WEIGHT and m > 0 else None

    def loses(self, batch: int) -> bool:
        """Whether rounds with lookup nodes measured fewer tokens per ms than rounds without."""
        with_, without = self.rate(batch, True), self.rate(batch, False)
        return with_ is not None and without is not None and with_ < without
