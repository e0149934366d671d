"""Serving the app under abuse: a connection cap, header timeouts, quiet accept errors.

aiohttp alone keeps every connection a client opens and waits forever for its headers,
so a few hundred slow-header connections exhaust file descriptors; asyncio then logs an
accept error per attempt. :class:`ConnectionGuard` wraps aiohttp's per-connection
protocol: connections past ``max_connections`` are closed on accept, and a connection
whose next request has not reached the app ``header_timeout_s`` after it opened (or
after its previous answer) is closed. :class:`RateLimitedLog` lets through at most one
accept error per interval and counts the rest.
"""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass, field

import structlog
from aiohttp import web

from common.config import Config

log = structlog.get_logger(__name__)
ACCEPT_LOG_INTERVAL_S = 10.0


class _Guarded(asyncio.Protocol):
    """aiohttp's RequestHandler behind the guard's accounting and header timer."""

    def __init__(self, inner: asyncio.Protocol, guard: "ConnectionGuard"):
        self._inner, self._guard = inner, guard
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.busy = False

    def connection_made(self, transport) -> None:
        if not self._guard.open_slot(transport, self):
            transport.abort()
            return
        self._transport = transport
        self._inner.connection_made(transport)
        self.arm()

    def arm(self) -> None:
        """(Re)start the header timer: the next request must reach the app in time."""
        self.disarm()
        self._timer = asyncio.get_running_loop().call_later(self._guard.header_timeout_s, self._expire)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        if not self.busy and self._transport is not None:
            self._guard.timeouts += 1
            self._transport.abort()

    def connection_lost(self, exc) -> None:
        self.disarm()
        if self._transport is not None:
            self._guard.close_slot(self._transport)
            self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self):
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


@dataclass
class ConnectionGuard:
    """Counts open connections and times out silent ones (one per gateway process)."""

    max_connections: int
    header_timeout_s: float
    refused: int = 0
    timeouts: int = 0
    _open: dict = field(default_factory=dict)  # transport -> _Guarded

    @property
    def open(self) -> int:
        return len(self._open)

    def factory(self, make_protocol):
        return lambda: _Guarded(make_protocol(), self)

    def open_slot(self, transport, proto: _Guarded) -> bool:
        if len(self._open) >= self.max_connections:
            self.refused += 1
            return False
        self._open[transport] = proto
        return True

    def close_slot(self, transport) -> None:
        self._open.pop(transport, None)

    def request_started(self, transport) -> None:
        proto = self._open.get(transport)
        if proto is not None:
            proto.busy = True
            proto.disarm()

    def request_finished(self, transport) -> None:
        proto = self._open.get(transport)
        if proto is not None:
            proto.busy = False
            proto.arm()


GUARD = web.AppKey("connection_guard", ConnectionGuard)


@web.middleware
async def track_requests(request: web.Request, handler) -> web.StreamResponse:
    """Tell the guard a request reached the app (its header timer stops) and when it ends."""
    guard = request.app.get(GUARD)
    transport = request.transport
    if guard is not None:
        guard.request_started(transport)
    try:
        return await handler(request)
    finally:
        if guard is not None:
            guard.request_finished(transport)


@dataclass
class RateLimitedLog:
    """An asyncio exception handler that logs accept errors at most once per interval."""

    interval_s: float = ACCEPT_LOG_INTERVAL_S
    clock: object = time.monotonic
    suppressed: int = 0
    _last: float = float("-inf")

    def __call__(self, loop, context: dict) -> None:
        if "accept" not in str(context.get("message", "")):
            loop.default_exception_handler(context)
            return
        now = self.clock()
        if now - self._last < self.interval_s:
            self.suppressed += 1
            return
        log.error("accept failed", error=str(context.get("exception")), suppressed_since_last=self.suppressed)
        self._last, self.suppressed = now, 0


async def start(app: web.Application, host: str, port: int, cfg: Config):
    """Listen with the guard in front; returns (asyncio server, aiohttp runner) to close."""
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(RateLimitedLog())
    guard = app[GUARD] = ConnectionGuard(cfg.max_connections, cfg.header_timeout_s)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                           keepalive_timeout=cfg.header_timeout_s)
    await runner.setup()
    server = await loop.create_server(guard.factory(runner.server), host, port, reuse_address=True)
    return server, runner


async def serve(app: web.Application, host: str, port: int, cfg: Config) -> None:
    """Serve ``app`` until SIGTERM/SIGINT, with the connection cap and header timeout."""
    loop = asyncio.get_running_loop()
    server, runner = await start(app, host, port, cfg)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        server.close()
        await runner.cleanup()
