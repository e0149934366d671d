"""How big a draft tree to ask for, within the tree budget (``common/tree_budget.py``).

``tree_size`` N in the config forces N nodes; 0 turns speculation off; ``auto`` (the
default) picks the shape that maximises expected committed tokens per second, from

* the hardware: measured cost curves, ms of one forward over T tokens, of the verifier
  (main model) and of the draft model (workers measure them at start), and
* the data: acceptance observed online. Every verified tree also tells what a *smaller*
  tree would have accepted: prune it to its best n nodes (EAGLE-2 re-ranking by draft
  score) at depth <= D, and the accepted path survives up to its first pruned node.
  For greedy decoding this counterfactual is exact, so one big tree measures every
  (n, D) at once. Every ``EXPLORE_EVERY``-th round (4x less often while plain decoding is
  best, backing off further while it stays best, and only while explores take at most
  ``PLAIN_EXPLORE_SHARE`` of the time, a share halved after each explore that left plain best:
  ``Exploring._explore_due``; never while the
  batch may generate fewer than ``EXPLORE_MIN_REMAINING`` tokens) one sequence drafts a tree
  about twice the current best (size and depth), so the estimates can
  grow toward bigger trees when they pay, while exploring stays cheap when the best is small
  (heavy load): ``explore.py``.

Expected throughput for a round of B sequences (Sequoia, arXiv 2402.12374 §3.3):
    tokens/ms(n, D) = B * (E[accepted | n, D] + 1) / (verify_ms(B * (n + 1)) + draft_ms(B, D))
with draft_ms = one forward over the newly committed tokens plus (D - 1) level passes
over ``width`` frontier nodes each; plain decoding is (n, D) = (0, 0) with rate
B / verify_ms(B). Larger batches make verification steeper, so the chosen tree shrinks
(down to plain decoding) as load grows. A tree is chosen only when it beats plain by
``SPEC_MARGIN`` (its explore rounds and draft catch-ups are not in the formula); a draft that
must first catch up on a backlog (new prompts, plain rounds) adds that prefill spread over
the tokens the batch is expected to still generate (``lengths.py``: learned from finished
requests, at most their ``max_tokens``).

Both curves are corrected by measured ms per (batch, size) bucket (``CostCorrection``, ``pricing.py``): the
verifier's by rows, the draft's by depth, from rounds without a catch-up (the level passes cost
about twice the curve at batch 1 on the 2-core host: logits, top-k and the tree mask per level).
The model can still be wrong (acceptance drifting with the text, lookup rows, load), so
``Calibration`` (``estimates.py``, with the cost curves and the acceptance table) checks its tokens:
committed over modelled tokens (slow, shrunk toward 1), for speculative and for plain rounds, scales
the model's rates, so trees that keep committing less than the table expects decode plainly; their
ms are priced by the corrected curves alone.
Rounds that carried prompt-lookup nodes are left out of it (their rows are outside the model),
and so are tree rounds whose drafts first caught up on a backlog (a one-off prefill).

The acceptance a round is priced with is its requests' own (``RequestAcceptance``, ``estimates.py``):
each request's trees feed the engine-wide table and the request's own, whose means are shrunk toward
the table's, and a batch is priced by its requests' mean, so a request the draft predicts badly (a
translation) is priced by its own trees once it has a few.

Prompt-lookup candidates (free draft tokens, only verify rows) are priced per sequence in
``lookup_policy.py`` (``lookup_nodes`` here); ``makespan.py`` discounts tokens gained off the
batch's critical path (E x ``fit`` in the rate) when no request takes a freed slot.
Torch-free.
"""

from __future__ import annotations

import math

from common.config import Config
from common.tree import TokenTree
from common.tree_budget import AUTO_DEFAULT_SIZE, TreeBudget
from services.scheduler.estimates import SIZES, AcceptanceTable, Calibration, RequestAcceptance, pruned_accepts
from services.scheduler.lookup_policy import LookupStats, SeqLookup
from services.scheduler.explore import EXPLORE_EVERY, Exploring

EXPLORE_MIN_REMAINING = 16  # tokens: no explore round when the batch may generate fewer (mean)
PLAIN_PROBE_EVERY = 16  # rounds: one plain round in this many keeps the measured plain verify price current
# A tree must beat plain decoding's rate by this fraction: its explore rounds and its draft's
# catch-ups are outside the model, and near break-even (a batch of 4-8 on 2 cores, where every
# verified row costs nearly a plain row) they made speculation 10-30% slower than plain (HTTP runs).
SPEC_MARGIN = 0.1


class TreePolicy(Exploring):
    """Chooses (size, depth) per round from the corrected cost curves (``CostPrices``) and the acceptance table."""

    def __init__(self, cfg: Config, width: int = 4) -> None:
        super().__init__(width)
        self.budget = TreeBudget.from_config(cfg)
        self.max_depth = cfg.max_accept_length
        self.table = AcceptanceTable(self.max_depth)
        self.round_table = None  # this round's batch-mean of its requests' own estimates (None: the table's)
        self.rounds = 0
        self.best = (AUTO_DEFAULT_SIZE, self.max_depth)
        self.last_reason = "default until measured"
        self.lookup = LookupStats()  # engine-wide: every sequence's prior (SeqLookup has its own)
        self.draft_modelled: tuple[int, int, float] | None = None  # (batch, depth, curve ms) of this round's trees
        self.draft_append = 0  # tokens the curve ms above has the drafts append first (batch x (expected + 1))
        self.explore_shape: tuple[int, int] | None = None  # this round's explore tree, for one sequence
        # this round measures plain decoding, so it grafts no lookup nodes (a grafted round calibrates
        # nothing: at 8 HTTP streams every 4th round was a plain probe with grafts, the factor never measured)
        self.probing_plain = False
        self.calibration = Calibration()
        self.modelled: tuple[int, bool, float, float] | None = None  # (batch, speculative, tokens, ms) last chosen
        self.plain_explores = 0  # explore rounds since plain decoding became best (reset when a tree wins)
        self.plain_ms = 0.0  # modelled ms of plain rounds since the last explore
        # the last priced round's best tree ((0, 0): none priced), its rate and the rate it had to beat (tokens/ms)
        self.runner_up: tuple[tuple[int, int], float, float] = ((0, 0), 0.0, 0.0)

    def observe(self, tree: TokenTree, accepted: list[int], own: RequestAcceptance | None = None) -> None:
        """One verified draft tree and its accepted node indices, into the engine-wide acceptance table and
        into ``own``, the request's own (``RequestAcceptance``)."""
        if len(tree) == 0:
            return
        kept = pruned_accepts(tree, accepted, self.max_depth)
        self.table.observe_pruned(kept)
        if own is not None:
            own.observe(kept)

    def expected(self, size_index: int, depth: int) -> float | None:
        """Expected accepted draft tokens of a (``SIZES[size_index]``, ``depth``) tree for this round's
        batch: the mean of its requests' own estimates (``RequestAcceptance.blend``) once one of them has
        verified a tree, else the engine-wide table's; None while the table has no estimate there."""
        if self.round_table is None:
            return self.table.expected(size_index, depth)
        own = float(self.round_table[size_index, depth])
        return None if math.isnan(own) else own  # NaN: the table has no estimate there

    def choose(self, batch: int, backlog: int = 0, remaining: float = float("inf"), fit: float = 1.0,
               own: list[RequestAcceptance] | tuple = ()) -> tuple[int, int]:
        """(tree nodes, max depth) for a round of ``batch`` sequences; (0, 0) = plain. On an
        explore round it is the current best, and ``explore_shape`` is the probe tree that one
        sequence of the batch drafts (exploring the whole batch cost up to 3 rounds' time at a
        batch of 8: every draft catches up and every sequence verifies the bigger tree).

        ``backlog``: tokens the drafts must catch up on (prefill) before this round's trees,
        beyond what a round normally appends (after plain rounds, or for new prompts);
        ``remaining``: mean tokens each sequence may still generate. Speculating now pays the
        catch-up once, so the model spreads it over the rounds left (``_modelled_best``);
        ``fit``: the batch's critical path accepts this times the expected draft tokens
        (``makespan.critical_fit``; 1.0 while freed slots are refilled); ``own``: the batch's requests'
        own acceptance readings (``expected``), none: the engine-wide table alone.

        Until ``estimates.COLD_START_TREES`` trees are verified one sequence speculates at once (the default tree: a
        smaller first tree on an AVX2-only host measured 1.08x plain in bf16 against 1.14x, as
        bigger cells were measured only by later explores); a batch of several decodes plainly
        while one of its sequences drafts a tree (``explore_shape``, sized by ``_first_explore``),
        unless the batch is about to finish (``EXPLORE_MIN_REMAINING``), as for every explore."""
        self.modelled = self.draft_modelled = None  # only a modelled choice is calibrated
        self.explore_shape, self.probing_plain = None, False
        if not self.budget.auto:
            return self.budget.default_shape()
        self.rounds += 1
        self.round_table = None
        if any(r.total is not None for r in own):
            table = self.table.estimates()
            self.round_table = sum(r.blend(table) for r in own) / len(own)  # float (len(SIZES), max_depth + 1)
        if self.verify is None or self.draft is None or not self.table.measured():
            return self._cold_start(batch, remaining)
        probe = self.rounds % PLAIN_PROBE_EVERY == EXPLORE_EVERY // 2 + 1  # between explore rounds
        if probe or (self.rounds % 4 == 3 and not self.calibration.measured(batch, False)):
            return self._probe_plain(batch)
        # the best for this batch, also on an explore round: a best left from an earlier batch (or the
        # default, on the first round after the cold start) gave a batch of 4 a 16-node tree each
        # (4.7 s for 31 tokens where a plain round took 0.2 s for 4, HTTP on an AVX2-only host)
        best, rate, model = self._modelled_best(batch, backlog, remaining, fit)
        self.best = best
        self.plain_explores = 0 if best != (0, 0) else self.plain_explores
        if self._explore_due(batch, backlog) and remaining >= EXPLORE_MIN_REMAINING:
            # probe a tree about twice the best (not for a batch about to finish: its
            # sequence's draft catch-up would cost several rounds for a few tokens)
            self.plain_explores += best == (0, 0)
            self.plain_ms = 0.0
            self.explore_shape = self._explore_tree()
            self.last_reason = "explore"
            return best
        return self._modelled_choice(batch, backlog, best, rate, model)

    def _cold_start(self, batch: int, remaining: float) -> tuple[int, int]:
        """The shape before the curves and the acceptance table are measured: without acceptance data every
        tree's expected gain is unknown, and the model would decode plainly until the next explore round;
        speculate to measure it. In a batch only one sequence drafts (the rest decode plainly): a default
        tree for all made every draft prefill its prompt first (HTTP, 8 streams: one 4.5 s round)."""
        self.last_reason = "default until measured"
        if batch > 1:
            if remaining >= EXPLORE_MIN_REMAINING:
                self.explore_shape = self._first_explore(batch)
            return 0, 0
        return AUTO_DEFAULT_SIZE, self.max_depth

    def _probe_plain(self, batch: int) -> tuple[int, int]:
        """A plain round that measures plain decoding's verify price (no lookup grafts: ``probing_plain``)."""
        self.last_reason, self.probing_plain = "measure plain", True
        self.modelled = (batch, False, batch, self._priced_ms(batch, 0, 0))
        self.plain_ms += self.modelled[3]
        return 0, 0

    def _modelled_choice(self, batch: int, backlog: int, best: tuple[int, int], rate: float,
                         model: tuple[int, bool, float, float]) -> tuple[int, int]:
        """``best`` (of expected ``rate`` tokens/ms, ``model`` its prediction) as this round's shape: recorded
        for calibration (not a tree round that first prefills a ``backlog``: its ms is mostly that one-off
        catch-up, which would also blur the level passes' cost) and named in ``last_reason``."""
        self.modelled = None if best != (0, 0) and backlog > 0 else model
        if best != (0, 0) and backlog == 0:
            exp = self.expected(SIZES.index(best[0]), best[1])
            self.draft_modelled = (batch, best[1], self._draft_curve_ms(batch, *best, exp))
            self.draft_append = self.append_tokens(batch, exp)
        factors = self.calibration.factor(batch, True), self.calibration.factor(batch, False)
        self.last_reason = (f"max expected tokens/ms {rate:.4f} at batch {batch} (calibration: speculative "
                            f"{factors[0]:.2f}, plain {factors[1]:.2f})")
        if best == (0, 0) and self.runner_up[0] != (0, 0):  # why no tree: the best one and the rate it had to beat
            (size, depth), top_rate, needed = self.runner_up
            self.last_reason += f"; best tree {size}x{depth}: {top_rate:.4f}, needs {needed:.4f}"
        self.plain_ms += model[3] if best == (0, 0) else 0.0
        return best

    def observe_round(self, speculative: bool, tokens: int, draft_ms: float = 0.0,
                      grafted: bool = False, appended: int | None = None) -> None:
        """A finished decode round (``tokens`` committed, ``draft_ms`` drafting the chosen trees; 0 =
        unknown; its verify ms go to ``observe_verify``) calibrates the tokens the model predicted for
        the shape chosen for it, and corrects the draft's cost per level, priced with the
        ``appended`` tokens the drafts first prefilled this round (None: as modelled, what the
        trees' expected accepted paths commit). A round after a deeper one (an explore, a 4-node tree,
        accepted lookup nodes) appends more: priced as modelled, a 1-node round after 4-node trees at
        8 HTTP streams (103 ms of draft for 35 tokens appended) set the draft's depth-1 cost at twice
        its price and the batch decoded plainly for the rest of the wave (1.10x where the other runs
        reached 1.28-1.36x). A round with
        prompt-lookup nodes (``grafted``) does not calibrate: its extra rows and tokens are outside
        the model, which compares draft trees with plain decoding (both kinds of round may carry
        grafts; ``lookup_policy`` judges those). Counted, one 8-node graft that gained nothing (122
        ms for 7 tokens where the tree alone was modelled at 92 ms, a batch of 4) pulled the trees'
        factor to 0.89 and the batch decoded plainly from then on; over HTTP at 4 streams tree
        rounds measured 0.054-0.058 tokens/ms against plain runs' 0.047-0.053 (BENCHMARKS.md)."""
        extra = 0.0  # curve ms of the tokens appended beyond the modelled ones
        if appended is not None and self.draft_modelled is not None:
            extra = self.draft.ms(max(1, appended)) - self.draft.ms(self.draft_append)
        if self.draft_modelled is not None and speculative and draft_ms > 0:
            batch, depth, curve_ms = self.draft_modelled
            self.draft_cost.observe(curve_ms + extra, batch, depth, draft_ms)
        if self.modelled is not None and self.modelled[1] == speculative and not grafted:
            batch, _, model_tokens, _ = self.modelled
            self.calibration.observe(batch, speculative, tokens, model_tokens)

    def _priced_ms(self, batch: int, size: int, depth: int, exp: float | None = None) -> float:
        """ms of a round of (``size``, ``depth``) trees ((0, 0): plain) at ``batch`` as the corrected
        curves price it now (``exp``: expected accepted draft tokens, default the acceptance table's);
        ``_modelled_best`` prices every shape with it: the corrections learn the cost per rows and per
        depth, so one shape that cost more than its curve (4-node trees at 8 streams: 40 rows, 2x a plain
        pass on an AMX host) does not also raise the price of a shape the curves already got right (1-node
        trees there: 16 rows, about a plain pass)."""
        if size == 0:
            return self.verify_ms(batch, batch)
        if exp is None:
            exp = self.expected(SIZES.index(size), depth) or 0.0
        return self.verify_ms(batch, batch * (size + 1)) + self._draft_ms(batch, size, depth, exp)

    def _modelled_best(self, batch: int, backlog: int = 0, remaining: float = float("inf"), fit: float = 1.0,
                       ) -> tuple[tuple[int, int], float, tuple[int, bool, float, float]]:
        """The (size, depth) of most expected tokens/ms (model rates times their calibration
        factors), that rate, and the uncalibrated (batch, speculative, tokens, ms) it predicts.
        A tree's rate carries the draft's catch-up of ``backlog`` tokens spread over the rounds
        left (``remaining`` / expected tokens per round); the prediction calibrated against the
        round carries all of it (that round pays it). The rate counts ``fit`` x the expected draft
        tokens (the critical path's share, ``makespan.py``); the prediction counts them all.
        Sets ``runner_up``: the best tree, its rate and the rate it had to beat (plain's times
        1 + ``SPEC_MARGIN``), which the round's reason names when plain decoding wins."""
        catch_up = self.draft.ms(backlog) if backlog > 0 else 0.0
        plain_ms = self._priced_ms(batch, 0, 0)
        best, model = (0, 0), (batch, False, float(batch), plain_ms)
        plain_rate = batch / plain_ms * self.calibration.factor(batch, False)
        spec_factor = self.calibration.factor(batch, True)
        top, top_rate, top_model = (0, 0), 0.0, model  # the tree of most expected tokens/ms
        for si, size in enumerate(SIZES):
            for depth in range(1, min(size, self.max_depth) + 1):
                exp = self.expected(si, depth)
                if exp is None:
                    continue
                ms = self._priced_ms(batch, size, depth, exp)
                rate = batch * (fit * exp + 1) / (ms + catch_up / max(1.0, remaining / (exp + 1))) * spec_factor
                if rate > top_rate:
                    top, top_rate, top_model = (size, depth), rate, (batch, True, batch * (exp + 1), ms + catch_up)
        self.runner_up = (top, top_rate, plain_rate * (1 + SPEC_MARGIN))
        if top_rate > plain_rate * (1 + SPEC_MARGIN):  # what a tree must beat
            return top, top_rate, top_model
        return best, plain_rate, model

    def lookup_nodes(self, batch: int, size: int, depth: int, seq: SeqLookup, value: float = 1.0) -> int:
        """Lookup nodes one sequence (its state ``seq``) may graft this round onto its draft tree
        of (``size``, ``depth``) in a batch of ``batch`` (0 = none), up to the budget's
        ``lookup_nodes``: ``SeqLookup.graft`` priced by the corrected verify cost, the expected
        accepted draft tokens of that tree and the engine-wide stats as prior; a gained token is
        worth ``value`` (less off the batch's critical path, ``makespan.py``); none on a round that
        measures plain decoding (``probing_plain``)."""
        cap = self.budget.lookup_nodes
        if self.probing_plain:
            return 0
        if cap == 0 or self.verify is None:
            return cap
        si = next((i for i, s in enumerate(SIZES) if s >= size), None) if size else None
        expected = (self.expected(si, max(1, depth)) if si is not None else 0.0) or 0.0
        return seq.graft(lambda rows: self.verify_ms(batch, rows), batch, size, expected, self.lookup, value, cap)
