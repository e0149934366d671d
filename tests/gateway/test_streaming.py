"""SSE framing, parsed from the raw bytes of the response."""

from __future__ import annotations

import json

from common import wire
from tests.gateway.conftest import make_test_app, serve
from tests.gateway.fakes import FakeBackend, deltas, silent_after


def parse_sse(raw: bytes) -> list:
    """Events of an SSE body; '[DONE]' stays a string."""
    assert raw.endswith(b"\n\n")
    events = []
    for block in raw.decode().split("\n\n")[:-1]:
        assert block.startswith("data: "), block
        data = block[len("data: "):]
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


def stream(backend, path="/v1/completions", **body):
    async def scenario(client):
        payload = {"prompt": "hi", "max_tokens": 10, "stream": True, **body}
        if path.endswith("chat/completions"):
            payload.pop("prompt")
            payload["messages"] = [{"role": "user", "content": "hi"}]
        r = await client.post(path, json=payload)
        return r.status, dict(r.headers), await r.read()
    return serve(make_test_app(backend), scenario)


class TestSse:
    def test_framing_and_done(self):
        """Events are data: lines, one id, finish on the last chunk, then [DONE]."""
        status, headers, raw = stream(FakeBackend(script=lambda s: deltas(s.request_id, ["ab", "c😀", "d"])))
        assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
        assert headers["X-Accel-Buffering"] == "no"
        events = parse_sse(raw)
        assert events[-1] == "[DONE]"
        chunks = events[:-1]
        assert len({c["id"] for c in chunks}) == 1
        assert "".join(c["choices"][0]["text"] for c in chunks) == "abc😀d"
        assert [c["choices"][0]["finish_reason"] for c in chunks][-1] == "length"

    def test_include_usage_is_one_last_event(self):
        """stream_options.include_usage adds exactly one usage event, last, with no choices."""
        _, _, raw = stream(FakeBackend(), stream_options={"include_usage": True})
        events = parse_sse(raw)
        usage_events = [e for e in events[:-1] if e.get("usage")]
        assert len(usage_events) == 1 and usage_events[0] is events[-2]
        assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == len("hello world")

    def test_chat_chunks(self):
        """Chat streams start with the assistant role and carry text in delta.content."""
        _, _, raw = stream(FakeBackend(), path="/v1/chat/completions")
        chunks = parse_sse(raw)[:-1]
        assert chunks[0]["object"] == "chat.completion.chunk"
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "hello world"

    def test_backend_death_mid_stream_is_an_error_event(self):
        """A silent scheduler ends the stream with an error event and no [DONE]."""
        status, _, raw = stream(FakeBackend(script=silent_after(["abc", "def"])))
        events = parse_sse(raw)
        assert status == 200 and "[DONE]" not in events
        assert "error" in events[-1] and all(c["choices"][0]["finish_reason"] is None for c in events[:-1])

    def test_backend_error_delta_is_an_error_event(self):
        """A TokenDelta with finish=ERROR becomes an error event, never a fake stop."""
        script = lambda s: [wire.TokenDelta(request_id=s.request_id, tokens=[97]),
                            wire.TokenDelta(request_id=s.request_id, tokens=[], finish=wire.FinishReason.ERROR,
                                            error="oom")]
        events = parse_sse(stream(FakeBackend(script=script))[2])
        assert "oom" in events[-1]["error"]["message"] and "[DONE]" not in events

    def test_stop_string_across_chunks_aborts(self):
        """A stop string split over deltas trims the output, finishes with stop, sends Abort."""
        backend = FakeBackend(script=lambda s: deltas(s.request_id, ["one ST", "OP two", "three"])[:2])
        events = parse_sse(stream(backend, stop=["STOP"])[2])
        chunks = events[:-1]
        assert "".join(c["choices"][0]["text"] for c in chunks) == "one "
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
        assert backend.aborts == [backend.submits[0].request_id]
