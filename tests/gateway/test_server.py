"""The gateway's listener under abuse: connection cap, header timeout, quiet accept errors."""

from __future__ import annotations

import asyncio

from common.config import Config
from services.gateway.server import GUARD, RateLimitedLog, start
from tests.gateway.conftest import make_test_app

PORT = 18410


async def _read_all(reader: asyncio.StreamReader, timeout: float) -> bytes:
    return await asyncio.wait_for(reader.read(), timeout)


class TestConnectionGuard:
    def test_cap_and_header_timeout(self):
        """Past max_connections a connection is closed at once; a slow-header one is closed
        after header_timeout_s; a normal request on a fresh connection still works, and /metrics
        counts both kinds of close and the one connection open."""
        cfg = Config(max_model_len=64, max_connections=2, header_timeout_s=0.5)

        async def main():
            app = make_test_app(max_connections=2, header_timeout_s=0.5)
            server, runner = await start(app, "127.0.0.1", PORT, cfg)
            try:
                slow = [await asyncio.open_connection("127.0.0.1", PORT) for _ in range(2)]
                for _, w in slow:
                    w.write(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")  # headers never finish
                await asyncio.sleep(0.1)
                r3, _ = await asyncio.open_connection("127.0.0.1", PORT)
                refused = await _read_all(r3, 2)
                closed = [await _read_all(r, 3) for r, _ in slow]  # the timer closes them
                r4, w4 = await asyncio.open_connection("127.0.0.1", PORT)
                w4.write(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                answer = await _read_all(r4, 3)
                return refused, closed, answer, app[GUARD]
            finally:
                server.close()
                await runner.cleanup()
        refused, closed, answer, guard = asyncio.run(main())
        assert refused == b"" and guard.refused == 1
        assert closed == [b"", b""] and guard.timeouts == 2
        assert answer.startswith(b"HTTP/1.1 200")
        for line in (b"treespec:http_connections_refused_total 1.0", b"treespec:http_header_timeouts_total 2.0",
                     b"treespec:http_connections_open 1.0"):
            assert line in answer


class TestRateLimitedLog:
    def test_accept_errors_logged_at_bounded_rate(self):
        """Of many accept errors within one interval, one is logged and the rest counted."""
        now = [0.0]
        handler = RateLimitedLog(interval_s=10.0, clock=lambda: now[0])
        context = {"message": "socket.accept() out of system resource", "exception": OSError(24, "EMFILE")}
        for _ in range(1000):
            handler(None, context)
        assert handler.suppressed == 999
        now[0] = 11.0
        handler(None, context)
        assert handler.suppressed == 0
