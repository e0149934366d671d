"""The gateway's ZeroMQ client of the scheduler.

One asyncio DEALER connects to the scheduler's ROUTER, says ``Hello(role=GATEWAY)`` and
then sends a Heartbeat every ``heartbeat_interval_s``. A listener task routes incoming
TokenDelta / Rejected frames to per-request queues and keeps the latest Stats. The
scheduler is expected to send Stats at least every heartbeat interval: a scheduler silent
for ``silence_timeout_s`` counts as down, which fails in-flight requests and /health.
Stats carry the scheduler's instance id (``epoch``): when it changes the scheduler has
restarted and forgotten every request, so every in-flight request fails at once.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import AsyncIterator, Protocol

import structlog
import zmq.asyncio

from common import transport, wire

log = structlog.get_logger(__name__)
POLL_S = 0.25  # how often a waiting request re-checks scheduler liveness


class BackendRejected(Exception):
    """The scheduler refused a request (queue full, not ready, bad request)."""

    def __init__(self, status: int, reason: str, retry_after_s: float = 1.0):
        super().__init__(reason)
        self.status, self.reason, self.retry_after_s = status, reason, retry_after_s


class BackendUnavailable(Exception):
    """The scheduler went silent, or a request ended with a backend error."""


class Backend(Protocol):
    """What the HTTP layer needs from the scheduler (ZmqBackend, or a fake in tests)."""

    @property
    def ready(self) -> bool: ...

    @property
    def connected(self) -> bool: ...

    @property
    def stats(self) -> wire.Stats | None: ...

    def generate(self, request_id: str, prompt: list[int],
                 params: wire.SamplingParams) -> AsyncIterator[wire.TokenDelta]: ...

    async def abort(self, request_id: str) -> None: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class ZmqBackend:
    """Scheduler client over one asyncio DEALER; see the module docstring."""

    def __init__(self, address: str, replica: str = "0", heartbeat_interval_s: float = 1.0,
                 silence_timeout_s: float = 5.0, curve_dir: str = ""):
        self._address, self._replica, self._curve_dir = address, replica, curve_dir
        self._interval, self._timeout = heartbeat_interval_s, silence_timeout_s
        self._ctx: zmq.asyncio.Context | None = None
        self._sock: zmq.asyncio.Socket | None = None
        self._queues: dict[str, asyncio.Queue] = {}
        self._tasks: list[asyncio.Task] = []
        self._last_seen = float("-inf")
        self._stats: wire.Stats | None = None
        self._epoch = ""

    @property
    def connected(self) -> bool:
        return time.monotonic() - self._last_seen < self._timeout

    @property
    def ready(self) -> bool:
        return self.connected and self._stats is not None and self._stats.ready

    @property
    def stats(self) -> wire.Stats | None:
        return self._stats

    async def start(self) -> None:
        self._ctx = zmq.asyncio.Context()
        self._sock = transport.async_dealer(self._ctx, self._address, self._curve_dir)
        await self._send(wire.Hello(role=wire.Role.GATEWAY, replica=self._replica, pid=os.getpid()))
        self._tasks = [asyncio.create_task(self._listen()), asyncio.create_task(self._heartbeat())]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._sock is not None:
            self._sock.close(linger=0)
        if self._ctx is not None:
            self._ctx.term()

    async def generate(self, request_id: str, prompt: list[int],
                       params: wire.SamplingParams) -> AsyncIterator[wire.TokenDelta]:
        """Submit and yield the request's TokenDeltas until one carries ``finish``.

        Raises BackendRejected, or BackendUnavailable when the scheduler goes silent.
        """
        queue: asyncio.Queue = asyncio.Queue()
        self._queues[request_id] = queue
        try:
            await self._send(wire.Submit(request_id=request_id, prompt=prompt, params=params))
            while True:
                msg = await self._next(queue)
                if isinstance(msg, BackendUnavailable):
                    raise msg
                if isinstance(msg, wire.Rejected):
                    raise BackendRejected(msg.status, msg.reason, msg.retry_after_s)
                yield msg
                if msg.finish is not None:
                    return
        finally:
            self._queues.pop(request_id, None)

    async def abort(self, request_id: str) -> None:
        self._queues.pop(request_id, None)
        await self._send(wire.Abort(request_id=request_id))

    async def _next(self, queue: asyncio.Queue) -> wire.Message:
        while True:
            try:
                return await asyncio.wait_for(queue.get(), POLL_S)
            except asyncio.TimeoutError:
                if not self.connected:
                    raise BackendUnavailable("the scheduler is not responding") from None

    async def _send(self, msg: wire.Message) -> None:
        assert self._sock is not None, "start() the backend first"
        await transport.async_send(self._sock, msg)

    async def _listen(self) -> None:
        while True:
            try:
                msg = await transport.async_recv(self._sock)
            except wire.WireError as exc:
                log.warning("dropped malformed frame", error=str(exc))
                continue
            self._last_seen = time.monotonic()
            self._route(msg)

    def _route(self, msg: wire.Message) -> None:
        if isinstance(msg, wire.Stats):
            if self._epoch and msg.epoch != self._epoch:
                self._fail_in_flight("the scheduler restarted and lost this request")
            self._epoch, self._stats = msg.epoch, msg
        elif isinstance(msg, (wire.TokenDelta, wire.Rejected)):
            queue = self._queues.get(msg.request_id)
            if queue is not None:
                queue.put_nowait(msg)

    def _fail_in_flight(self, reason: str) -> None:
        """End every waiting request with BackendUnavailable(reason)."""
        log.warning("failing in-flight requests", reason=reason, requests=len(self._queues))
        for queue in self._queues.values():
            queue.put_nowait(BackendUnavailable(reason))

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            if self.connected:
                beat = wire.Heartbeat(role=wire.Role.GATEWAY, replica=self._replica)
            else:  # the scheduler may have restarted: introduce ourselves again
                beat = wire.Hello(role=wire.Role.GATEWAY, replica=self._replica, pid=os.getpid())
            await self._send(beat)
