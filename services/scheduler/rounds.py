"""The scheduler's round driver: placement, draft -> verify -> commit over many workers.

Pure and torch-free: every method takes the messages that arrived and returns the
messages to send as ``(peer identity, message)`` pairs; the loop (``loop.py``) does the
I/O. One round at a time: DraftStep to each draft worker holding running sequences, then
(all answered, or failed) VerifyStep to each verifier, then commit and TokenDeltas. With
draft/verify overlap on, a look-ahead DraftStep goes out with the VerifyStep (``overlap.py``).
A worker that fails (lost, dropped, timed out) only costs its sequences a re-prefill:
``Placement.lost`` makes the next round resend every committed token. Admission and the ends of requests
outside a commit (abort, failure) are ``RequestBook``'s (``requests.py``).
"""

from __future__ import annotations

from common import wire
from common.config import Config
from common.logging import round_event
from common.tree import TokenTree
from services.scheduler.core import SchedulerCore, Sequence
from services.scheduler.makespan import observe_fits
from services.scheduler.overlap import Lookahead, overlap_pays
from services.scheduler.placement import Out, Placer
from services.scheduler.planning import Planner, Round
from services.scheduler.requests import RequestBook
from services.scheduler.tree_policy import TreePolicy
from services.scheduler.workers import Worker, WorkerRegistry

EMPTY_TREE = wire.tree_to_wire(TokenTree.empty())
VERIFIER_WAIT_FACTOR = 6  # with no verifier, requests wait this many heartbeat timeouts, then fail


class RoundDriver(RequestBook):
    """Owns the request -> gateway map and the round in flight; see module docstring."""

    def __init__(self, core: SchedulerCore, workers: WorkerRegistry, cfg: Config, log,
                 step_timeout_s: float, policy: TreePolicy | None = None) -> None:
        self.core, self.workers, self.cfg, self.log = core, workers, cfg, log
        self.placer = Placer(workers, cfg)
        self.step_timeout_s = step_timeout_s
        self.owners: dict[str, bytes] = {}  # request id -> gateway identity
        self.losses: dict[str, int] = {}
        self.current: Round | None = None
        self.round_no = 0
        self.planner = Planner(cfg, log, policy or TreePolicy(cfg))  # the trees (planning.py)
        self.ahead = Lookahead()  # draft/verify overlap (overlap.py)
        self.had_draft = False  # a draft worker joined once: without one now we degrade, not refuse
        self.plain_steps = 0  # sequence rounds verified without a tree while speculative (degraded)
        self.no_verifier_since: float | None = None

    @property
    def policy(self) -> TreePolicy:
        """The tree policy (``tree_policy.py``) the planner applies."""
        return self.planner.policy

    @property
    def speculative(self) -> bool:
        return self.policy.budget.speculative

    def overlap(self) -> bool:
        """Draft/verify overlap is on now (config ``overlap``; auto: separate accelerators)."""
        devs = {r: [w.devices for w in self.workers.alive(r)] for r in (wire.Role.DRAFT, wire.Role.VERIFIER)}
        return self.speculative and overlap_pays(self.cfg.overlap, devs[wire.Role.DRAFT], devs[wire.Role.VERIFIER])

    def ready(self) -> bool:
        """A verifier is alive and warmed up, and so is a draft unless tree_size is 0 or a
        draft has joined before (without one now the scheduler decodes plainly: degraded)."""
        ok = self.workers.ready(wire.Role.VERIFIER)
        return ok and (not self.speculative or self.had_draft or self.workers.ready(wire.Role.DRAFT))

    # ---- the round ----------------------------------------------------------------------
    def start(self, now: float) -> list[Out]:
        """Begin a round if none is in flight and sequences are running or waiting (and no
        look-ahead step is still out: its draft worker is busy with it anyway)."""
        if self.current is not None or self.ahead.busy() or not (self.core.running or self.core.waiting):
            return []
        if not self.workers.alive(wire.Role.VERIFIER):  # wait a bounded time for one to (re)join
            self.no_verifier_since = self.no_verifier_since if self.no_verifier_since is not None else now
            wait_s = VERIFIER_WAIT_FACTOR * self.cfg.heartbeat_timeout_s
            return self._fail_all(f"no verifier replica for {wait_s:.0f} s") if now - self.no_verifier_since > wait_s else []
        self.no_verifier_since = None
        self.planner.refills.round_started(len(self.core.admit(self.workers.capacity(wire.Role.VERIFIER))))
        seqs = [s for s in self.core.running.values() if self.placer.place(s, wire.Role.VERIFIER)]
        if not seqs:
            return []
        first = self.planner.prefill_first(seqs)
        if first:
            seqs, (size, depth) = first, (0, 0)
        else:
            size, depth = self.planner.choose(seqs, waiting=bool(self.core.waiting))
        guessed = {s.request_id: t for s in seqs if (t := self.ahead.take(s, size)) is not None}
        self.round_no += 1
        rnd = Round(number=self.round_no, phase=wire.Role.DRAFT, deadline=now + self.step_timeout_s,
                    seq_ids=[s.request_id for s in seqs], draft_held={s.request_id: s.draft.held for s in seqs},
                    trees=guessed, guessed=len(guessed))
        self.current = rnd
        if not self.cfg.speculate_first_token:
            rnd.prefill = {s.request_id for s in seqs if s.verifier.held == 0}
        shapes = self.planner.draft_shapes(seqs, rnd, (size, depth))
        groups: dict[str, list[wire.DraftSeq]] = {}
        for s in seqs:
            shape = shapes.get(s.request_id, (0, 0))
            w = self.placer.place(s, wire.Role.DRAFT) if shape[0] > 0 else None
            if w is not None:
                groups.setdefault(w.key, []).append(self.core.draft_seq(s, *shape))
        out = []
        for key, entries in groups.items():
            rnd.pending[key] = {e.seq_id for e in entries}
            out.append((self.workers.get(key).identity, wire.DraftStep(round=rnd.number, seqs=entries)))
        return out if out else self._start_verify(now)

    def on_draft(self, identity: bytes, res: wire.DraftResult, now: float) -> list[Out]:
        """Collect one draft worker's trees; lost sequences are re-placed (plain step now)."""
        if res.guess:
            return self._on_guess(identity.hex(), res)
        out = self._collect(identity.hex(), res.round, wire.Role.DRAFT, res.trees)
        if out is None:
            return []
        rnd = self.current
        rnd.draft_ms = max(rnd.draft_ms, res.draft_ms)
        return out + (self._start_verify(now) if not rnd.pending else [])

    def _collect(self, key: str, number: int, phase: wire.Role, replies: dict) -> list[Out] | None:
        """Store worker ``key``'s per-sequence replies (trees or outcomes) in the round in
        flight; a sequence it did not answer is re-placed (a verifier's loss is counted).
        None when the reply is not awaited (stale round, wrong phase, unknown worker)."""
        rnd = self.current
        if rnd is None or rnd.phase != phase or number != rnd.number or key not in rnd.pending:
            return None
        into = rnd.trees if phase == wire.Role.DRAFT else rnd.outs
        out: list[Out] = []
        for sid in rnd.pending.pop(key):
            seq = self.core.running.get(sid)
            if sid in replies:
                into[sid] = replies[sid]
            elif seq is not None:
                out += self.placer.unplace(seq, phase)
                out += self._count_loss(seq) if phase == wire.Role.VERIFIER else []
        return out

    def _start_verify(self, now: float) -> list[Out]:
        rnd = self.current
        rnd.phase, rnd.deadline = wire.Role.VERIFIER, now + self.step_timeout_s
        self.planner.graft_lookup(rnd, [s for sid in rnd.seq_ids if (s := self.core.running.get(sid)) is not None],
                                  waiting=bool(self.core.waiting))
        groups: dict[str, list[wire.VerifySeq]] = {}
        for sid in rnd.seq_ids:
            seq = self.core.running.get(sid)
            w = self.workers.get(seq.verifier.worker) if seq is not None else None
            if w is not None:
                groups.setdefault(w.key, []).append(self.core.verify_seq(seq, rnd.trees.get(sid, EMPTY_TREE)))
        out = []
        for key, entries in groups.items():
            rnd.pending[key] = {e.seq_id for e in entries}
            out.append((self.workers.get(key).identity, wire.VerifyStep(round=rnd.number, seqs=entries)))
        return out + self._send_guesses(rnd, now) if out else self._finish()

    def _send_guesses(self, rnd: Round, now: float) -> list[Out]:
        """Overlap: while the verifier scores this round's trees, draft the next round's."""
        if not self.overlap():
            return []
        return self.ahead.send(rnd.number + 1, rnd.trees, self.core.running, self.workers, self.policy.budget,
                               self.planner.shape, now + self.step_timeout_s)

    def _on_guess(self, key: str, res: wire.DraftResult) -> list[Out]:
        out: list[Out] = []
        for sid in self.ahead.on_result(key, res):
            seq = self.core.running.get(sid)
            if seq is not None:
                out += self.placer.unplace(seq, wire.Role.DRAFT)
        return out

    def on_verify(self, identity: bytes, res: wire.VerifyResult, now: float) -> list[Out]:
        """Collect one verifier's outcomes; commit when every verifier has answered."""
        out = self._collect(identity.hex(), res.round, wire.Role.VERIFIER, res.outs)
        if out is None:
            return []
        for sid, why in res.failed.items():  # refused for good by the verifier: fail it alone
            seq = self.core.running.get(sid)
            if seq is not None and sid in self.current.seq_ids:
                out += self._fail(seq, f"the verifier refused this sequence: {why}"[:300])
        rnd = self.current
        rnd.verify_ms = max(rnd.verify_ms, res.verify_ms)
        return out + (self._finish() if not rnd.pending else [])

    def _finish(self) -> list[Out]:
        """Commit every verified sequence, emit deltas, free finished sequences."""
        rnd, self.current = self.current, None
        out: list[Out] = []
        accepted, by_draft = [], []
        for sid in rnd.seq_ids:
            seq = self.core.running.get(sid)
            if seq is None:
                continue
            if sid not in rnd.outs:
                seq.draft.rolled_back(rnd.draft_held[sid])
                continue
            out += self._commit(rnd, seq, by_draft, accepted)
        observe_fits(by_draft)
        if any(seq.finish is not None for seq, _ in accepted):
            self.planner.refills.finished(others_running=bool(self.core.running))
        nodes = sum(t.tokens.shape[0] for t in rnd.trees.values() if t.tokens.shape)  # tree rows verified
        if not rnd.prefill and accepted:  # a prefill round's cost is the prompt's, not decoding's
            self.planner.observe_costs(rnd, accepted, nodes)
        round_event(self.log, rnd.number, rnd.draft_ms, rnd.verify_ms, [n for _, n in accepted],
                    from_guess=rnd.guessed, tree_nodes=nodes, lookup_grafts=len(rnd.grafts),
                    lookup_nodes=[len(rnd.grafts[s.request_id].chain_nodes) if s.request_id in rnd.grafts else 0
                                  for s, _ in accepted])
        return out

    def _commit(self, rnd: Round, seq: Sequence, by_draft: list, accepted: list) -> list[Out]:
        """Commit one verified sequence of ``rnd``: its delta to its gateway, its fit to ``by_draft``,
        ``(seq, tokens committed)`` to ``accepted``; a finished sequence is released."""
        sid = seq.request_id
        tree = rnd.trees.get(sid, EMPTY_TREE)
        degraded = (self.speculative and self.planner.shape[0] > 0 and seq.params.speculate and sid not in rnd.drafted
                    and sid not in rnd.prefill and sid not in rnd.deferred)
        self.plain_steps += int(degraded)
        fit = self.planner.observe_tree(rnd, seq, wire.tree_from_wire(tree))
        if fit is None:
            seq.fit.age()
        else:
            by_draft.append(fit)
        delta = self.core.commit(seq, tree.tokens.numpy().tolist(), rnd.outs[sid])
        self.losses.pop(sid, None)
        accepted.append((seq, len(delta.tokens)))
        gw = self.owners.get(sid)
        out: list[Out] = [] if gw is None else [(gw, delta)]
        if delta.finish is not None:
            if delta.finish in (wire.FinishReason.STOP, wire.FinishReason.LENGTH):
                self.planner.lengths.observe(len(seq.output))
            self.log.info("finished", request_id=sid, finish=delta.finish.value, output_tokens=len(seq.output),
                          verify_steps=seq.verify_steps)
            self.owners.pop(sid, None)
            out += self._release(seq)
        return out

    # ---- failures -----------------------------------------------------------------------
    def worker_gone(self, w: Worker, now: float, why: str) -> list[Out]:
        """A worker died, timed out or restarted: re-place its sequences, unblock the round."""
        self.log.warning("worker dropped", worker=w.replica, role=w.role.value, reason=why, seqs=len(w.seqs))
        out: list[Out] = []
        self.ahead.drop_worker(w.key)
        for sid in list(w.seqs):
            seq = self.core.running.get(sid)
            if seq is not None:
                out += self.placer.unplace(seq, w.role)
        w.seqs.clear()
        rnd = self.current
        if rnd is not None and rnd.pending.pop(w.key, None) is not None and not rnd.pending:
            out += self._start_verify(now) if rnd.phase == wire.Role.DRAFT else self._finish()
        return out

    def check_deadline(self, now: float) -> list[Out]:
        """Drop the workers whose reply to the round in flight (or to a look-ahead step) is
        overdue (a lost reply must not hang the round); their sequences are re-placed."""
        out = self._drop_overdue(list(self.ahead.pending),
                                 now) if self.ahead.busy() and now >= self.ahead.deadline else []
        rnd = self.current
        if rnd is None or now < rnd.deadline:
            return out
        phase, overdue = rnd.phase, list(rnd.pending)
        out += self._drop_overdue(overdue, now)
        if self.current is not rnd or rnd.phase != phase:
            return out  # dropping a worker already moved the round on
        for key in overdue:  # workers that were already gone: nothing more will come from them
            rnd.pending.pop(key, None)
        if not rnd.pending:
            out += self._start_verify(now) if phase == wire.Role.DRAFT else self._finish()
        return out

    def _drop_overdue(self, keys: list[str], now: float) -> list[Out]:
        out: list[Out] = []
        for key in keys:
            w = self.workers.drop(key)
            if w is not None:
                out += self.worker_gone(w, now, "step reply timed out")  # also forgets its guesses
            else:
                self.ahead.drop_worker(key)
        return out
