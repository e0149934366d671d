"""Requests as the scheduler's round driver keeps them: admission, the request -> gateway map, and every way a
request ends outside a round's commit (abort, failure, no verifier left), its KV freed on its workers at once.

``RoundDriver`` (``rounds.py``) drives the rounds on top of this. Pure and torch-free: every method returns
the messages to send as ``(peer identity, message)`` pairs; the loop (``loop.py``) does the I/O.
"""

from __future__ import annotations

from common import wire
from services.scheduler.core import AdmissionError, Sequence, draft_gap
from services.scheduler.placement import Out

MAX_VERIFY_LOSSES = 3  # consecutive rounds a verifier may report a sequence lost before it errors


class RequestBook:
    """Admission and early ends of requests. ``RoundDriver`` sets what it reads: ``core`` (``SchedulerCore``),
    ``cfg``, ``log``, ``placer`` (``Placer``), ``ahead`` (look-ahead steps, ``overlap.Lookahead``), ``owners``
    (request id -> gateway identity), ``losses`` (request id -> consecutive rounds the verifier lost it), and
    ``ready()``."""

    def submit(self, gateway: bytes, msg: wire.Submit) -> list[Out]:
        """Queue a request, or answer Rejected (503 not ready, 400 invalid, 429 full)."""
        if not self.ready():
            return [(gateway, wire.Rejected(request_id=msg.request_id, status=503,
                                            reason="no draft/verifier worker is ready"))]
        try:
            seq = self.core.submit(msg)
        except AdmissionError as exc:
            return [(gateway, wire.Rejected(request_id=msg.request_id, status=exc.status, reason=exc.reason))]
        seq.draft_hidden = draft_gap(len(seq.prompt), self.cfg.draft_context_window)
        self.owners[msg.request_id] = gateway
        self.log.info("submitted", request_id=msg.request_id, prompt_tokens=len(msg.prompt),
                      draft_prompt_tokens=seq.draft_len(len(seq.prompt)))
        return []

    def abort(self, request_id: str) -> list[Out]:
        """Drop a request, free its KV on its workers at once, send its final delta."""
        seq = self.core.abort(request_id)
        if seq is None:
            return []
        self.log.info("aborted", request_id=request_id)
        return self._release(seq) + self._final(seq, wire.FinishReason.ABORT)

    # ---- ending a request: free its KV on its workers, send its gateway the final delta ----------
    def _release(self, seq: Sequence) -> list[Out]:
        self.losses.pop(seq.request_id, None)
        self.ahead.discard(seq.request_id)
        return self.placer.unplace(seq, wire.Role.DRAFT) + self.placer.unplace(seq, wire.Role.VERIFIER)

    def _final(self, seq: Sequence, reason: wire.FinishReason, error: str | None = None) -> list[Out]:
        gw = self.owners.pop(seq.request_id, None)
        delta = wire.TokenDelta(request_id=seq.request_id, tokens=[], finish=reason, error=error,
                                prompt_tokens=len(seq.prompt), queue_ms=round(seq.queue_ms, 3))
        return [] if gw is None else [(gw, delta)]

    def _fail_all(self, error: str) -> list[Out]:
        """End every request with finish=ERROR (no verifier left)."""
        out: list[Out] = []
        for seq in list(self.core.running.values()) + list(self.core.waiting):
            self.core.abort(seq.request_id)
            seq.finish = wire.FinishReason.ERROR
            self.log.error("request failed", request_id=seq.request_id, error=error)
            out += self._release(seq) + self._final(seq, wire.FinishReason.ERROR, error)
        return out

    def _count_loss(self, seq: Sequence) -> list[Out]:
        n = self.losses[seq.request_id] = self.losses.get(seq.request_id, 0) + 1
        if n < MAX_VERIFY_LOSSES:
            return []
        return self._fail(seq, f"the verifier lost this sequence {n} rounds in a row (invalid tokens or no KV room)")

    def fail(self, request_id: str, err: str) -> list[Out]:
        """End a request (running or waiting) with finish=ERROR and ``err``; [] if unknown."""
        seq = self.core.running.get(request_id) or next(
            (s for s in self.core.waiting if s.request_id == request_id), None)
        return [] if seq is None else self._fail(seq, err)

    def _fail(self, seq: Sequence, err: str) -> list[Out]:
        """End one request with finish=ERROR: free its KV, tell its gateway."""
        self.core.abort(seq.request_id)
        seq.finish = wire.FinishReason.ERROR
        self.log.error("request failed", request_id=seq.request_id, error=err)
        return self._release(seq) + self._final(seq, wire.FinishReason.ERROR, err)
