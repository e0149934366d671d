"""What each sequence's tree is this round: the round driver's tree planning and its feedback.

``rounds.py`` moves messages (DraftStep, VerifyStep, TokenDelta); this module decides what goes
in them and learns from what comes back, with the tree policy (``tree_policy.py``):

* which sequences get a round of their own for their first token (prefill first);
* the round's tree shape (size, depth) for the batch, rated by what the critical path accepts
  (``makespan.py``), and the explore tree one sequence drafts instead;
* how many prompt-lookup nodes each sequence's tree gets (``candidates.py``);
* after the verify step: acceptance per source, each sequence's draft fit, the round's cost.

Pure and torch-free; shapes are token counts, times are ms.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from common import wire
from common.config import Config
from common.tree import TokenTree, depths, subtree
from services.scheduler import candidates
from services.scheduler.core import Sequence
from services.scheduler.lengths import OutputLengths
from services.scheduler.makespan import DraftFit, Refills, critical_fit, path_values
from services.scheduler.tree_policy import TreePolicy


@dataclass
class Round:
    """One round in flight. ``pending``: worker key -> sequence ids awaiting its reply."""

    number: int
    phase: wire.Role
    deadline: float  # time.monotonic() seconds
    seq_ids: list[str]
    draft_held: dict[str, int]  # draft placement before the round, rolled back to when not committed
    pending: dict[str, set[str]] = field(default_factory=dict)
    trees: dict[str, wire.Tree] = field(default_factory=dict)
    outs: dict[str, wire.VerifyOut] = field(default_factory=dict)
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    guessed: int = 0  # sequences whose tree came from the overlap look-ahead (no draft step)
    # Sequences whose verifier holds nothing yet: their first token comes from the main model's
    # prefill alone (empty tree), so the draft's prefill and tree stay off the time to first token;
    # the draft catches up (prefills) in the next round.
    prefill: set[str] = field(default_factory=set)
    # Running sequences that decode plainly this round by plan (``Planner.draft_shapes``), not counted
    # as degraded steps: others prefill and their draft would first have to catch up, or one token is
    # all they have left (``Sequence.depth_left`` 0).
    deferred: set[str] = field(default_factory=set)
    capped: set[str] = field(default_factory=set)  # sequences whose tree is cut to their depth_left
    drafted: set[str] = field(default_factory=set)  # sequences with a draft-model tree (fresh or guessed)
    grafts: dict[str, candidates.Grafted] = field(default_factory=dict)  # prompt-lookup nodes per sequence
    lookup_offered: set[str] = field(default_factory=set)  # sequences prompt lookup could graft onto this round
    explorer: str | None = None  # the sequence drafting the policy's explore tree this round
    appended: int = 0  # tokens the drafting sequences' drafts prefill before their trees (their backlogs)


def capped_shape(shape: tuple[int, int], depth: int) -> tuple[int, int]:
    """(size, depth) ``shape`` cut to at most ``depth`` levels; (0, 0) when ``depth`` < 1 (tokens).
    The size stays: the draft's best-first tree of that many nodes within ``depth`` levels holds every
    node the full shape's tree had there (more acceptance, never more verify rows), and it saves the
    draft's deeper level passes. (Shrinking the size in proportion lost the accepted path: a 16-node,
    12-level tree with 8 tokens left committed 9 tokens, its 10-node, 8-level cut 3.)"""
    size, levels = shape
    if depth >= levels:
        return shape
    return (size, depth) if depth >= 1 else (0, 0)


class Planner:
    """The tree policy applied to one round's batch; holds what outlives a round: the policy, the
    latest shape, finished requests' output lengths and whether clients refill freed slots."""

    def __init__(self, cfg: Config, log, policy: TreePolicy) -> None:
        self.cfg, self.log, self.policy = cfg, log, policy
        self.shape = policy.budget.default_shape()  # (size, depth) of the latest round, tokens
        self.shape_changed = False  # choose() changed the shape; draft_shapes() logs it once
        self.lengths = OutputLengths()  # finished requests' output lengths: the rounds a catch-up is spread over
        self.refills = Refills()  # whether freed slots are taken at once (makespan.py)

    def prefill_first(self, seqs: list[Sequence]) -> list[Sequence]:
        """The sequences whose first token is due (their verifier holds nothing) when others would
        draft (they speculate, and so did the latest round): they get a round of their own, before
        the others' next one ([] otherwise). Mixed into a speculative round, a new prompt's first token
        waited for the others' draft step and tree rows: at 2 HTTP streams time to first token
        was 968 ms against 721 ms with plain decoding. Prefill first is vLLM V0's default order;
        it costs the running sequences one more verify pass per arriving prompt."""
        if not self.policy.budget.speculative or self.cfg.speculate_first_token or self.shape[0] == 0:
            return []
        new = [s for s in seqs if s.verifier.held == 0]
        return new if any(s.params.speculate for s in seqs if s.verifier.held > 0) else []

    def choose(self, seqs: list[Sequence], waiting: bool) -> tuple[int, int]:
        """The round's (size, depth) for ``seqs`` (``waiting``: a request waits for a slot), rated by
        the critical path's draft fit. A change of shape is logged by ``draft_shapes``, which follows in
        the same round, so a round that changes shape and explores logs one line."""
        fit = critical_fit(self.remaining(seqs), [s.fit.ratio() for s in seqs], self.refilled(waiting))
        size, depth = self.policy.choose(len(seqs), *self._catch_up(seqs), fit=fit, own=[s.acceptance for s in seqs])
        self.shape_changed |= (size, depth) != self.shape
        self.shape = (size, depth)
        return size, depth

    def draft_shapes(self, seqs: list[Sequence], rnd: Round, shape: tuple[int, int]) -> dict[str, tuple[int, int]]:
        """(size, depth) per sequence that drafts this round: ``shape`` for every speculating one
        (not guessed, past its prefill); on an explore round the sequence whose draft is least
        behind drafts the policy's ``explore_shape`` instead (cheapest catch-up); sets ``rnd.explorer``.
        Logs one "tree shape" line when the shape changed or a sequence drafts an explore (a cold batch
        of requests with speculation off logged an explore every round, before).

        In a round that also prefills new prompts, a sequence whose draft lags more than a round's tokens
        does not draft (``rnd.deferred``): its draft's catch-up would run before the verifier's pass and
        delay every new prompt's first token (HTTP, 8 streams: a wave's first request, prefilled alone,
        made the other 7 wait 174 ms for its draft's prefill). It catches up in the next round, with theirs.

        A sequence near its ``max_tokens`` drafts no deeper than it can commit (``capped_shape`` of its
        ``depth_left``; none with one token left, ``rnd.deferred``), explore trees included (``_explore``):
        in 8-stream HTTP waves the last round drafted 20 nodes for two sequences that had one token
        each left (76 ms of draft, 22 verify rows for 2 tokens)."""
        speculating = [s for s in seqs if s.params.speculate and s.request_id not in rnd.trees
                       and s.request_id not in rnd.prefill]
        if rnd.prefill:
            rnd.deferred = {s.request_id for s in speculating if self._lag(s, shape[1]) > 0}
        rnd.deferred |= {s.request_id for s in speculating if s.depth_left() < 1}
        wanted = [s for s in speculating if s.request_id not in rnd.deferred]
        shapes = {s.request_id: capped_shape(shape, s.depth_left()) for s in wanted}
        rnd.capped = {sid for sid, got in shapes.items() if got != shape}
        explored = self._explore(wanted, shape, rnd)
        if explored is not None:
            shapes[rnd.explorer] = explored
            rnd.capped.discard(rnd.explorer)
        rnd.appended = sum(s.draft_backlog() for s in wanted if shapes[s.request_id][0] > 0)
        if self.shape_changed or explored is not None:
            self.log.info("tree shape", tree_size=shape[0], max_depth=shape[1], batch=len(seqs),
                          reason=self.policy.last_reason, explore=explored)
            self.shape_changed = False
        return shapes

    def _explore(self, wanted: list[Sequence], shape: tuple[int, int], rnd: Round) -> tuple[int, int] | None:
        """The policy's explore tree and its drafter (``rnd.explorer``), or None: among ``wanted`` the
        least-behind draft with room for the whole tree; else the one with the most room, its tree
        capped, when that still probes deeper than the round's ``shape`` (short requests measure too)."""
        explore = self.policy.explore_shape
        if explore is None or not wanted:
            return None
        room = [s for s in wanted if s.depth_left() >= explore[1]]
        if room:
            rnd.explorer = min(room, key=lambda s: s.draft_backlog()).request_id
            return explore
        most = max(wanted, key=lambda s: s.depth_left())
        if most.depth_left() <= shape[1]:
            return None
        rnd.explorer = most.request_id
        return capped_shape(explore, most.depth_left())

    def remaining(self, seqs: list[Sequence]) -> list[float]:
        """Tokens each sequence is expected to still generate (``lengths.remaining``)."""
        return [self.lengths.remaining(len(s.output), s.params.max_tokens - len(s.output)) for s in seqs]

    def refilled(self, waiting: bool) -> bool:
        """A slot that comes free is taken at once: a request waits, or clients refill (makespan.py)."""
        return self.refills.refilling or waiting

    @staticmethod
    def _lag(seq: Sequence, depth: int) -> int:
        """Tokens the sequence's draft must prefill beyond what one round of trees ``depth`` levels
        deep appends (its accepted path and bonus token: depth + 1; 1 after plain rounds): a catch-up
        its next tree pays first (0 when none). The slack was the budget's max depth + 1 (13 tokens):
        at 8 HTTP streams a 1-node tree round after three plain rounds appended 4-5 tokens per draft
        (82 ms against about 50), counted as a normal round, and the draft's cost correction at depth 1
        kept that price: 1-node trees read 0.045-0.05 tokens/ms where they commit about 0.08, and the
        batch decoded plainly for the rest of the wave (0.97x)."""
        return max(0, seq.draft_backlog() - (depth + 1))

    def _catch_up(self, seqs: list[Sequence]) -> tuple[int, float]:
        """(tokens the drafts lag beyond one round's worth of the latest shape, mean tokens each is
        expected to still generate: ``lengths.remaining``) of the speculating sequences past their
        first token: what a tree round now must prefill first, and over how many tokens that pays off."""
        spec = [s for s in seqs if s.params.speculate and s.verifier.held > 0]
        if not spec:
            return 0, float("inf")
        backlog = sum(self._lag(s, self.shape[1]) for s in spec)  # beyond a round of the latest shape
        left = self.remaining(spec)
        return backlog, sum(left) / len(left)

    def graft_lookup(self, rnd: Round, seqs: list[Sequence], waiting: bool) -> None:
        """Graft prompt-lookup candidates onto each speculating sequence's tree in ``rnd.trees``
        (``candidates.py``), as many nodes as the tree policy finds worth their verify rows for that
        sequence, its gained tokens valued by whether they shorten the batch's run (``makespan.py``).
        ``seqs``: the round's running sequences. First cuts every tree (the look-ahead's guesses were
        drafted at the round's shape) to its sequence's ``depth_left``; lookup grafts respect it too."""
        self._cut_to_budget(rnd, seqs)
        rnd.drafted = set(rnd.trees)
        for seq, value in zip(seqs, path_values(self.remaining(seqs), self.refilled(waiting))):
            depth = min(self.policy.budget.max_depth, seq.depth_left())
            if not seq.params.speculate or depth < 1:
                continue
            sid = seq.request_id
            nodes = self.policy.lookup_nodes(len(rnd.seq_ids), *self.shape, seq.lookup, value=value)
            if nodes == 0:
                continue
            rnd.lookup_offered.add(sid)
            got = candidates.graft_lookup(seq.tokens, rnd.trees.get(sid), self.cfg, nodes, depth,
                                          candidates.step_logprob(self.policy, seq.lookup))
            if got is not None:
                rnd.trees[sid], rnd.grafts[sid] = got

    def observe_tree(self, rnd: Round, seq: Sequence, tree: TokenTree) -> tuple[DraftFit, int] | None:
        """Record a verified ``tree``'s acceptance per source (``candidates.observe``); returns the
        sequence's draft fit and the tokens its draft part accepted when the tree was a draft-model
        tree other than the explore tree (the input of ``makespan.observe_fits``), else None."""
        sid = seq.request_id
        drafted = candidates.observe(self.policy, tree, rnd.outs[sid].accepted, rnd.grafts.get(sid),
                                     sid in rnd.lookup_offered, seq.lookup, seq.acceptance)
        return (seq.fit, drafted) if sid in rnd.drafted and sid != rnd.explorer and sid not in rnd.capped else None

    @staticmethod
    def _cut_to_budget(rnd: Round, seqs: list[Sequence]) -> None:
        """Drop the nodes of ``rnd.trees`` deeper than their sequence's ``depth_left`` (the tree is
        removed when nothing is left; the sequence joins ``rnd.capped``)."""
        for seq in seqs:
            sent = rnd.trees.get(seq.request_id)
            if sent is None or (sent.tokens.shape or [0])[0] <= seq.depth_left():  # n nodes reach depth n at most
                continue
            tree = wire.tree_from_wire(sent)  # validated on receipt (replies.py)
            keep = np.flatnonzero(depths(tree.parents) <= seq.depth_left())  # depths: 1 = the root's children
            if len(keep) == len(tree):
                continue
            rnd.capped.add(seq.request_id)
            if len(keep):
                rnd.trees[seq.request_id] = wire.tree_to_wire(subtree(tree, keep))
            else:
                del rnd.trees[seq.request_id]

    def observe_costs(self, rnd: Round, committed: list[tuple[Sequence, int]], nodes: int) -> None:
        """Feed a decode round's ms (``nodes``: tree nodes verified) to the tree policy (verify cost,
        calibration) and each sequence's tokens over the round's ms to its lookup rates (with or
        without its grafts)."""
        tokens, round_ms = sum(n for _, n in committed), rnd.draft_ms + rnd.verify_ms
        self.policy.observe_verify(len(committed), len(committed) + nodes, rnd.verify_ms)
        self.policy.observe_round(nodes > 0, tokens, 0.0 if rnd.guessed else rnd.draft_ms,
                                  grafted=bool(rnd.grafts), appended=None if rnd.guessed else rnd.appended)
        for seq, n in committed:
            seq.lookup.rates.observe(len(committed), seq.request_id in rnd.grafts, n, round_ms)
