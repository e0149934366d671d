"""The scheduler's synchronous core: request state, admission, round planning, commit.

No sockets and no torch: the event loop (``loop.py``) or the in-process engine
(``local.py``) feeds it messages and sends what it returns. One round for the running
batch is: ``draft_step`` -> DraftResult -> ``verify_step`` -> VerifyResult -> ``commit``.
"""

from __future__ import annotations

import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from common import wire
from common.wire import FinishReason
from services.scheduler.estimates import RequestAcceptance
from services.scheduler.lookup_policy import SeqLookup
from services.scheduler.makespan import DraftFit

DRAFT_SINK_TOKENS = 32  # leading prompt tokens the draft always sees (chat header, system prompt start)


def draft_gap(prompt_len: int, window: int) -> tuple[int, int]:
    """The prompt positions ``[a, b)`` hidden from the draft model, (0, 0) for none.

    ``window`` (tokens, config ``draft_context_window``; 0 = off): the draft sees the first
    ``DRAFT_SINK_TOKENS`` prompt tokens and the last ``window`` ones, numbered contiguously,
    so its catch-up prefill of a long prompt costs at most ``DRAFT_SINK_TOKENS + window``
    tokens. The attention-sink layout of StreamingLLM (Xiao et al. 2023, arXiv 2309.17453,
    §3.2, positions assigned within the cache). Lossless: the draft only proposes tokens;
    the main model, which verifies them, sees every token."""
    if window <= 0 or prompt_len <= DRAFT_SINK_TOKENS + window:
        return 0, 0
    return DRAFT_SINK_TOKENS, prompt_len - window


@dataclass
class Placement:
    """What one worker's KV cache holds for one sequence: the worker (its registry key,
    None = not placed) and ``held``, how many leading tokens of the sequence (``prompt +
    output``, then any tokens guessed past it) it holds once the steps sent to it are
    answered. Only the named transitions below change it."""

    worker: str | None = None
    held: int = 0

    def place(self, worker: str) -> None:
        """Assign a worker that holds nothing of the sequence yet."""
        self.worker, self.held = worker, 0

    def sent(self, upto: int) -> None:
        """A step carries the tokens up to ``upto``: the worker will hold them."""
        self.held = upto

    def accepted(self, upto: int) -> None:
        """The verifier kept its accepted path: it holds the first ``upto`` tokens."""
        self.held = upto

    def rolled_back(self, to: int) -> None:
        """Tokens past ``to`` were never committed (a lost round, a wrong guess): the next
        step's ``prefix_len`` overwrites them."""
        self.held = min(self.held, to)

    def lost(self) -> None:
        """The worker dropped the KV (or died): the next round re-prefills from 0."""
        self.worker, self.held = None, 0


@dataclass
class Sequence:
    """All state of one request; ``draft`` / ``verifier``: what the assigned workers hold."""

    request_id: str
    prompt: list[int]
    params: wire.SamplingParams
    eos_ids: frozenset[int]
    seed: int
    output: list[int] = field(default_factory=list)
    draft: Placement = field(default_factory=Placement)
    verifier: Placement = field(default_factory=Placement)
    finish: FinishReason | None = None
    verify_steps: int = 0  # verification steps that committed tokens (MAL = output / verify_steps)
    draft_hidden: tuple[int, int] = (0, 0)  # prompt positions [a, b) the draft does not see (draft_gap())
    lookup: SeqLookup = field(default_factory=SeqLookup)  # its prompt-lookup statistics (lookup_policy.py)
    fit: DraftFit = field(default_factory=DraftFit)  # the draft's acceptance on it relative to its batch (makespan.py)
    acceptance: RequestAcceptance = field(default_factory=RequestAcceptance)  # its own trees' acceptance (estimates.py)
    submitted_s: float = 0.0  # the core's clock when it was queued (s)
    queue_ms: float = 0.0  # ms it waited in the queue before admission (0 until admitted)

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    def depth_left(self) -> int:
        """Tree depth that can still commit (tokens): a verify step commits the accepted path plus
        one bonus token and the sequence stops at ``max_tokens`` (admission keeps prompt + max_tokens
        within the context), so nodes deeper than ``max_tokens - output - 1`` are cut unread."""
        return self.params.max_tokens - len(self.output) - 1

    def draft_len(self, upto: int) -> int:
        """How many tokens the draft's view has of the sequence's first ``upto`` tokens."""
        a, b = self.draft_hidden
        return min(upto, a) + max(0, upto - b)

    def draft_backlog(self) -> int:
        """Tokens the draft model must still prefill to be level with the sequence (tokens)."""
        return self.draft_len(len(self.prompt) + len(self.output)) - self.draft_len(self.draft.held)

    def draft_view(self, start: int, upto: int | None = None) -> tuple[int, list[int]]:
        """(prefix_len, tokens) of a draft step resending the sequence from position ``start``
        up to ``upto`` (default: all), in the draft's numbering: the gap's tokens are skipped
        and positions past it shift down. A ``start`` inside the gap resends from its start."""
        a, b = self.draft_hidden  # (0, 0) when nothing is hidden: the first branch
        toks = self.tokens if upto is None else self.tokens[:upto]
        if start >= b:
            return start - (b - a), toks[start:]
        start = min(start, a)
        return start, toks[start:a] + toks[b:]

    def placement(self, role: wire.Role) -> Placement:
        """The sequence's placement on its ``role`` worker (draft or verifier)."""
        return self.draft if role == wire.Role.DRAFT else self.verifier


class AdmissionError(Exception):
    """Submit refused; ``status`` is the HTTP status the gateway should answer (429/400)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class SchedulerCore:
    """Owns every request; bounded running set + bounded FIFO queue. ``clock``: seconds (monotonic), for
    each request's queue time (``Sequence.queue_ms``, sent with its deltas)."""

    def __init__(self, max_running: int, max_queue: int, max_model_len: int, eos_ids: set[int],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_running, self.max_queue, self.max_model_len = max_running, max_queue, max_model_len
        self.clock = clock
        self.eos_ids = frozenset(eos_ids)
        self.running: dict[str, Sequence] = {}
        self.waiting: deque[Sequence] = deque()
        self.num_drafts = self.num_draft_tokens = self.num_accepted = 0
        self.num_prompt_tokens = self.num_generated = 0  # admitted prompts' tokens, committed output tokens
        self.accepted_per_pos: list[int] = []

    def submit(self, msg: wire.Submit) -> Sequence:
        """Queue a request; raises AdmissionError (400 invalid, 429 queue full)."""
        p = msg.params
        if not msg.prompt:
            raise AdmissionError(400, "prompt is empty")
        if p.max_tokens < 1:
            raise AdmissionError(400, "max_tokens must be at least 1")
        if len(msg.prompt) + p.max_tokens > self.max_model_len:
            raise AdmissionError(400, f"prompt ({len(msg.prompt)} tokens) + max_tokens ({p.max_tokens}) "
                                      f"exceeds the context length {self.max_model_len}")
        if msg.request_id in self.running or any(s.request_id == msg.request_id for s in self.waiting):
            raise AdmissionError(400, f"duplicate request id {msg.request_id}")
        if len(self.running) >= self.max_running and len(self.waiting) >= self.max_queue:
            raise AdmissionError(429, "the request queue is full")
        seed = p.seed if p.seed is not None else random.getrandbits(62)
        seq = Sequence(request_id=msg.request_id, prompt=list(msg.prompt), params=p, eos_ids=self.eos_ids, seed=seed,
                       submitted_s=self.clock())
        self.waiting.append(seq)
        return seq

    def admit(self, capacity: int | None = None) -> list[Sequence]:
        """Move waiting requests into the running set (FIFO) while there is room; sets their ``queue_ms``."""
        room = self.max_running if capacity is None else min(self.max_running, capacity)
        moved = []
        while self.waiting and len(self.running) < room:
            seq = self.waiting.popleft()
            seq.queue_ms = (self.clock() - seq.submitted_s) * 1e3
            self.running[seq.request_id] = seq
            self.num_prompt_tokens += len(seq.prompt)
            moved.append(seq)
        return moved

    def abort(self, request_id: str) -> Sequence | None:
        """Remove a request wherever it is; returns it (finish = ABORT) or None."""
        seq = self.running.pop(request_id, None)
        if seq is None:
            for s in list(self.waiting):
                if s.request_id == request_id:
                    self.waiting.remove(s)
                    seq = s
        if seq is not None and seq.finish is None:
            seq.finish = FinishReason.ABORT
        return seq

    def draft_seq(self, seq: Sequence, tree_size: int, max_depth: int) -> wire.DraftSeq:
        """The draft-step entry for ``seq``; marks its new tokens as sent to the draft.

        The draft needs at least one new token (its hidden state is the tree's root): when it
        already holds every token (the verifier lost the last round), the last one is re-sent
        at ``prefix_len - 1`` and the worker rolls its KV back by one."""
        toks = seq.tokens
        prefix_len, new = seq.draft_view(min(seq.draft.held, len(toks) - 1))
        entry = wire.DraftSeq(seq_id=seq.request_id, prefix_len=prefix_len, new_tokens=new, tree_size=tree_size,
                              max_depth=max_depth, temperature=seq.params.temperature, top_p=seq.params.top_p,
                              top_k=seq.params.top_k, grammar=seq.params.grammar,
                              output=seq.output if seq.params.grammar else [])
        seq.draft.sent(len(toks))
        return entry

    def verify_seq(self, seq: Sequence, tree: wire.Tree) -> wire.VerifySeq:
        """The verify-step entry for ``seq`` with its draft ``tree``."""
        p = seq.params
        penalties = p.presence_penalty or p.frequency_penalty or p.repetition_penalty != 1.0
        hist = seq.output if (penalties or p.grammar) else []
        ban_depth = max(0, p.min_tokens - len(seq.output))
        banned = sorted(set(p.stop_token_ids) | (set() if p.ignore_eos else seq.eos_ids)) if ban_depth else []
        held = seq.verifier.held
        return wire.VerifySeq(seq_id=seq.request_id, prefix_len=held, new_tokens=seq.tokens[held:], tree=tree,
                              params=p, history=hist, seed=seq.seed, banned=banned, ban_depth=ban_depth)

    def commit(self, seq: Sequence, tree_tokens: list[int], out: wire.VerifyOut) -> wire.TokenDelta:
        """Apply a verification result: accepted tokens + bonus, truncated at the first
        stop (EOS / stop id after min_tokens, max_tokens, context limit)."""
        seq.verifier.accepted(len(seq.tokens) + len(out.accepted))
        seq.verify_steps += 1
        new = [tree_tokens[a] for a in out.accepted] + [out.bonus]
        self._count(len(tree_tokens), len(out.accepted))
        kept = []
        for tok in new:
            kept.append(tok)
            seq.output.append(tok)
            seq.finish = self._stop_reason(seq, tok)
            if seq.finish is not None:
                break
        self.num_generated += len(kept)
        lps = out.logprobs[: len(kept)] if out.logprobs is not None else None
        if seq.finish is not None:
            self.running.pop(seq.request_id, None)
        return wire.TokenDelta(request_id=seq.request_id, tokens=kept, logprobs=lps, finish=seq.finish,
                               prompt_tokens=len(seq.prompt), queue_ms=round(seq.queue_ms, 3))

    def _stop_reason(self, seq: Sequence, tok: int) -> FinishReason | None:
        p = seq.params
        n = len(seq.output)
        if n >= p.min_tokens and ((tok in seq.eos_ids and not p.ignore_eos) or tok in p.stop_token_ids):
            return FinishReason.STOP
        if n >= p.max_tokens or len(seq.prompt) + n >= self.max_model_len:
            return FinishReason.LENGTH
        return None

    def _count(self, drafted: int, accepted: int) -> None:
        """Speculation counters (vLLM's spec_decode_* semantics)."""
        if drafted == 0:
            return
        self.num_drafts += 1
        self.num_draft_tokens += drafted
        self.num_accepted += accepted
        while len(self.accepted_per_pos) < accepted:
            self.accepted_per_pos.append(0)
        for i in range(accepted):
            self.accepted_per_pos[i] += 1
