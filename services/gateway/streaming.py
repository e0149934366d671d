"""Server-sent events for streamed completions.

Frames are ``data: <json>\\n\\n``; the stream ends with ``data: [DONE]`` after success, or
with one error event (``data: {"error": {...}}``) and no [DONE] when the backend failed.
Proxies are told not to buffer (``X-Accel-Buffering: no``).
"""

from __future__ import annotations

import json

from aiohttp import web

DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
               "X-Accel-Buffering": "no"}


def frame(obj: dict) -> bytes:
    """One SSE event holding ``obj`` as compact JSON."""
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


class SseWriter:
    """Writes events to one streaming HTTP response."""

    def __init__(self, request: web.Request, headers: dict[str, str] | None = None):
        self._request = request
        self.response = web.StreamResponse(status=200, headers={**SSE_HEADERS, **(headers or {})})

    async def open(self) -> None:
        await self.response.prepare(self._request)

    async def send(self, obj: dict) -> None:
        await self.response.write(frame(obj))

    async def done(self) -> None:
        await self.response.write(DONE)
        await self.response.write_eof()

    async def fail(self, message: str, type: str = "server_error", code: str | None = "backend_error") -> None:
        """Send one error event and end the stream (no [DONE]: the output is incomplete)."""
        await self.send({"error": {"message": message, "type": type, "param": None, "code": code}})
        await self.response.write_eof()
