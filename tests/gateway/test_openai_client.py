"""The official openai client against the gateway on a loopback port (fake backend)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading

import openai
import pytest
from aiohttp import web

from tests.gateway.conftest import make_test_app
from tests.gateway.fakes import FakeBackend, deltas


TOOL_CHUNKS = ['<tool_call>\n{"name": "get_weather", "argu', 'ments": {"city": ', '"Paris"}}\n</tool_call>']
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def backend():
    return FakeBackend(script=lambda s: deltas(s.request_id, TOOL_CHUNKS if b"<tools>" in bytes(s.prompt)
                                               else ["Hel", "lo 你", "好!"]))


@pytest.fixture(scope="module")
def base_url(backend):
    """Serve the app in a background thread; yield its /v1 URL."""
    app = make_test_app(backend)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, handler_cancellation=True)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.SockSite(runner, sock).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)


@pytest.fixture
def client(base_url):
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)


class TestOpenAIClient:
    def test_completion(self, client):
        """completions.create returns the text and usage."""
        r = client.completions.create(model="treespec", prompt="hi", max_tokens=8)
        assert r.choices[0].text == "Hello 你好!" and r.usage.completion_tokens == len("Hello 你好!".encode())

    def test_speculation_off_through_extra_body(self, client, backend):
        """``extra_body={"speculation": False}`` reaches the scheduler as a request that does not
        speculate; without it requests speculate."""
        client.chat.completions.create(model="treespec", messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                                       extra_body={"speculation": False})
        client.chat.completions.create(model="treespec", messages=[{"role": "user", "content": "hi"}], max_tokens=8)
        assert [s.params.speculate for s in backend.submits[-2:]] == [False, True]

    def test_completion_stream(self, client):
        """Streamed completion chunks concatenate to the full text."""
        chunks = list(client.completions.create(model="treespec", prompt="hi", max_tokens=8, stream=True))
        assert "".join(c.choices[0].text for c in chunks) == "Hello 你好!"

    def test_chat(self, client):
        """chat.completions.create returns an assistant message."""
        r = client.chat.completions.create(model="treespec", messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=8)
        assert r.choices[0].message.content == "Hello 你好!" and r.choices[0].finish_reason == "length"

    def test_chat_stream_with_usage(self, client):
        """Streamed chat yields content deltas and one final usage chunk."""
        stream = client.chat.completions.create(model="treespec", messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=8, stream=True, stream_options={"include_usage": True})
        chunks = list(stream)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello 你好!"
        assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0

    def test_bad_request_raises(self, client):
        """A 400 surfaces as openai.BadRequestError."""
        with pytest.raises(openai.BadRequestError):
            client.completions.create(model="treespec", prompt="hi", max_tokens=8, n=2)

    def test_tool_call(self, client):
        """A tool call comes back as message.tool_calls with finish_reason tool_calls."""
        r = client.chat.completions.create(model="treespec", messages=[{"role": "user", "content": "weather?"}],
                                           tools=TOOLS, max_tokens=10)
        call = r.choices[0].message.tool_calls[0]
        assert r.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"city": "Paris"} and r.choices[0].message.content is None

    def test_tool_call_streamed(self, client):
        """Streamed: argument deltas that the client joins into the call's arguments."""
        chunks = list(client.chat.completions.create(
            model="treespec", messages=[{"role": "user", "content": "weather?"}], tools=TOOLS, max_tokens=10,
            stream=True))
        calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
        assert calls[0].function.name == "get_weather" and calls[0].id
        assert json.loads("".join(tc.function.arguments or "" for tc in calls)) == {"city": "Paris"}
        assert len(calls) > 2 and chunks[-1].choices[0].finish_reason == "tool_calls"

    def test_tool_result_turn(self, client):
        """The follow-up turn with the assistant's tool_calls and a role "tool" message is served."""
        r = client.chat.completions.create(model="treespec", max_tokens=8, messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
                                                  "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])
        assert r.choices[0].message.content == "Hello 你好!"
