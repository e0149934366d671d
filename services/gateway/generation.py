"""One request's run: backend TokenDeltas -> detokenized, stop-checked text pieces.

Drives the backend stream, the incremental detokenizer and the stop-string matcher, and
records the request's metrics. Whenever the run ends before the scheduler finished the
request (stop string matched, client gone, handler cancelled) it sends Abort.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import aclosing
from dataclasses import dataclass
from typing import AsyncIterator

import structlog
import zmq

from common import wire
from services.gateway.backend import Backend, BackendRejected, BackendUnavailable
from services.gateway.detokenizer import IncrementalDetokenizer
from services.gateway.metrics import Metrics
from services.gateway.stops import StopMatcher

log = structlog.get_logger(__name__)
MAX_QUEUE_MS = 86_400_000.0  # a day: a queue time the scheduler reports beyond it is not observed


@dataclass(frozen=True)
class Piece:
    """Output of one TokenDelta: text to send and the delta's tokens (for logprobs)."""

    text: str
    tokens: list[int]
    logprobs: list[wire.TokenLogprob] | None
    finish: str | None = None  # set on the last piece: stop | length | abort


class Generation:
    """Runs one request; iterate :meth:`pieces`, then read the usage counts."""

    def __init__(self, backend: Backend, tokenizer, metrics: Metrics, request_id: str,
                 prompt: list[int], params: wire.SamplingParams, stops: list[str]):
        self._backend, self._metrics = backend, metrics
        self.request_id, self._prompt, self._params = request_id, prompt, params
        self._detok, self._stops = IncrementalDetokenizer(tokenizer), StopMatcher(stops)
        self._released = 0  # characters the stop matcher has let through
        self.prompt_tokens, self.completion_tokens = len(prompt), 0
        self._done, self._reason = False, wire.FinishReason.ABORT.value  # type: str | None
        self._start = self._last = time.monotonic()

    async def pieces(self) -> AsyncIterator[Piece]:
        """Yield pieces until one has ``finish``; raises BackendRejected / BackendUnavailable."""
        log.info("request received", request_id=self.request_id, prompt_tokens=len(self._prompt),
                 max_tokens=self._params.max_tokens)
        try:
            stream = self._backend.generate(self.request_id, self._prompt, self._params)
            async with aclosing(stream) as deltas:
                async for delta in deltas:
                    piece = await self._step(delta)
                    yield piece
                    if piece.finish is not None:
                        return
        except BackendRejected:
            self._done, self._reason = True, None  # a refusal, not a generation: counted as HTTP 429 / 503
            raise
        except BackendUnavailable:
            self._done, self._reason = True, wire.FinishReason.ERROR.value
            raise
        finally:
            await self._end()

    async def _step(self, delta: wire.TokenDelta) -> Piece:
        if delta.finish is wire.FinishReason.ERROR or delta.error:
            raise BackendUnavailable(delta.error or "the backend failed this request")
        self._observe(delta)
        tokens, logprobs = list(delta.tokens), delta.logprobs
        text = self._detok.push(tokens) + (self._detok.flush() if delta.finish else "")
        matched = self._stops.push(text)
        finish = delta.finish.value if delta.finish else None
        self._released += len(matched.text)
        if matched.stopped:
            finish = wire.FinishReason.STOP.value
            # Tokens past the one that completed the stop string are not part of the
            # output: drop them from logprobs and usage (as vLLM does).
            keep = self._detok.trim_to(self._released + len(matched.stop), len(tokens))
            self.completion_tokens -= len(tokens) - keep
            tokens, logprobs = tokens[:keep], (logprobs[:keep] if logprobs is not None else None)
        elif finish is not None:
            matched = type(matched)(matched.text + self._stops.flush(), False)
        if finish is not None:
            self._reason = finish
            if delta.finish is None:  # a stop string ended it; the scheduler is still going
                await self._backend.abort(self.request_id)
            self._done = True
        return Piece(matched.text, tokens, logprobs, finish)

    def _observe(self, delta: wire.TokenDelta) -> None:
        now, n = time.monotonic(), len(delta.tokens)
        if delta.prompt_tokens:
            self.prompt_tokens = delta.prompt_tokens
        if n and self.completion_tokens == 0:
            self._metrics.ttft.observe(now - self._start)
            if 0.0 <= delta.queue_ms <= MAX_QUEUE_MS:  # the scheduler's figure; NaN or absurd: not observed
                self._metrics.queue_time.observe(delta.queue_ms / 1e3)
        elif n:
            for _ in range(n):  # several tokens per round: spread the gap over them
                self._metrics.itl.observe((now - self._last) / n)
        self.completion_tokens += n
        self._last = now if n else self._last

    async def _end(self) -> None:
        if not self._done:
            self._done = True
            try:
                await asyncio.shield(self._backend.abort(self.request_id))
            except zmq.ZMQError as exc:  # the scheduler may already be gone
                log.warning("abort failed", request_id=self.request_id, error=str(exc))
        log.info("request finished", request_id=self.request_id, finished_reason=self._reason,
                 prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens,
                 e2e_ms=round((time.monotonic() - self._start) * 1e3, 1))
        if self._reason is None:
            return
        m = self._metrics
        m.requests.labels(self._reason).inc()
        m.prompt_tokens.inc(self.prompt_tokens)
        m.generation_tokens.inc(self.completion_tokens)
        m.e2e.observe(time.monotonic() - self._start)
