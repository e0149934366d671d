"""Issue 13's protocol edges, as openai-python and agent frameworks send them."""

from __future__ import annotations

import pytest

from tests.gateway.conftest import make_test_app, serve
from tests.gateway.fakes import FakeBackend

GOOD = {"prompt": "hi", "max_tokens": 5}
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
BIG = 2**64


def call(app, method, path, **kw):
    async def scenario(client):
        r = await client.request(method, path, **kw)
        body = await r.json() if r.content_type == "application/json" else await r.text()
        return r.status, body
    return serve(app, scenario)


class TestNullIsAbsent:
    @pytest.mark.parametrize("field", ["temperature", "top_p", "n", "stream", "presence_penalty",
                                       "frequency_penalty", "logprobs", "echo", "max_tokens", "seed",
                                       "stop", "top_k", "min_tokens", "best_of", "user", "stream_options"])
    def test_null_completion_field_is_default(self, field):
        """A null optional field is treated as absent (200 with the default)."""
        backend = FakeBackend()
        status, _ = call(make_test_app(backend), "POST", "/v1/completions", json={**GOOD, field: None})
        assert status == 200
        assert backend.submits[0].params.temperature == 1.0 or field != "temperature"

    def test_null_chat_fields(self):
        """openai-python's nulls on chat (tools, tool_choice, response_format, ...) are absent."""
        body = {**CHAT, **{k: None for k in ("tools", "tool_choice", "response_format", "logprobs",
                                              "top_logprobs", "max_completion_tokens", "n")}}
        body["messages"] = [{"role": "user", "content": "hi", "name": None}]
        assert call(make_test_app(), "POST", "/v1/chat/completions", json=body)[0] == 200


class TestDeveloperRole:
    def test_developer_renders_as_system(self):
        """[developer I, user Q] renders like [system I, user Q], not like [user Q]."""
        prompts = []
        for first in ("developer", "system", None):
            backend = FakeBackend()
            msgs = ([{"role": first, "content": "I"}] if first else []) + [{"role": "user", "content": "Q"}]
            call(make_test_app(backend), "POST", "/v1/chat/completions", json={**CHAT, "messages": msgs})
            prompts.append(backend.submits[0].prompt)
        assert prompts[0] == prompts[1] != prompts[2]


class TestIntegerRanges:
    @pytest.mark.parametrize("field,value", [("seed", BIG), ("seed", -BIG), ("top_k", BIG), ("min_tokens", BIG),
                                             ("stop_token_ids", [BIG]), ("max_tokens", BIG), ("n", BIG),
                                             ("logprobs", BIG), ("best_of", BIG)])
    def test_huge_integer_is_400_naming_it(self, field, value):
        """Integers beyond the field's range are a 400 naming the field, never a 500."""
        backend = FakeBackend()
        status, body = call(make_test_app(backend), "POST", "/v1/completions", json={**GOOD, field: value})
        assert status == 400 and body["error"]["param"] == field and backend.submits == []

    def test_int64_seed_is_served(self):
        """The largest int64 seed reaches the scheduler unchanged."""
        backend = FakeBackend()
        assert call(make_test_app(backend), "POST", "/v1/completions", json={**GOOD, "seed": 2**63 - 1})[0] == 200
        assert backend.submits[0].params.seed == 2**63 - 1


class TestModels:
    def test_unknown_model_is_404_model_not_found(self):
        """An unknown model name gets OpenAI's 404 model_not_found error; nothing is queued."""
        backend = FakeBackend()
        status, body = call(make_test_app(backend), "POST", "/v1/completions", json={**GOOD, "model": "gpt-9"})
        assert status == 404 and body["error"]["code"] == "model_not_found" and backend.submits == []
        assert body["error"]["type"] == "invalid_request_error" and body["error"]["param"] == "model"

    def test_aliases_are_served_and_echoed(self):
        """Every configured name is served, and the response names the one asked for."""
        app = make_test_app(served_model_name="a", served_model_aliases=("b",))
        status, body = call(app, "POST", "/v1/completions", json={**GOOD, "model": "b"})
        assert status == 200 and body["model"] == "b"

    def test_get_model_by_id(self):
        """GET /v1/models/{id}: the card for a served name, 404 model_not_found otherwise."""
        app = make_test_app(served_model_name="org/name")
        assert call(app, "GET", "/v1/models/org/name")[1]["id"] == "org/name"
        status, body = call(make_test_app(), "GET", "/v1/models/nope")
        assert status == 404 and body["error"]["code"] == "model_not_found"


class TestErrorBodies:
    @pytest.mark.parametrize("method,path,status", [("GET", "/nope", 404), ("GET", "/v1/completions", 405),
                                                    ("DELETE", "/v1/models", 405)])
    def test_unknown_route_and_method_are_json(self, method, path, status):
        """Unknown routes and methods answer an OpenAI error JSON, not plain text."""
        got, body = call(make_test_app(), method, path)
        assert got == status and set(body["error"]) == {"message", "type", "param", "code"}

    @pytest.mark.parametrize("kw", [{"data": "prompt=hi"}, {"data": b'{"prompt": "hi"}',
                                                           "headers": {"Content-Type": "text/plain"}}])
    def test_non_json_body_is_415(self, kw):
        """Form and text/plain bodies (what a web page can send cross-site) are 415."""
        backend = FakeBackend()
        status, body = call(make_test_app(backend), "POST", "/v1/completions", **kw)
        assert status == 415 and "application/json" in body["error"]["message"] and backend.submits == []

    def test_unexpected_exception_is_json_500(self):
        """A bug in a handler is a logged JSON 500, not aiohttp's plain text."""
        class Broken:
            vocab_size = 10

            def encode(self, *a, **k):
                raise RuntimeError("boom")
        status, body = call(make_test_app(tokenizer=Broken()), "POST", "/v1/completions", json=GOOD)
        assert status == 500 and body["error"]["type"] == "server_error"


class TestContentParts:
    def test_text_parts_joined(self):
        """Text content parts are joined into the message text."""
        backend = FakeBackend()
        msgs = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
        call(make_test_app(backend), "POST", "/v1/chat/completions", json={**CHAT, "messages": msgs})
        assert bytes(backend.submits[0].prompt).decode().startswith("<user>ab")

    def test_image_part_is_400_naming_its_type(self):
        """An image_url part is a 400 that names the part type (not a pydantic string error)."""
        msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}]
        status, body = call(make_test_app(), "POST", "/v1/chat/completions", json={**CHAT, "messages": msgs})
        assert status == 400 and "image_url" in body["error"]["message"] and body["error"]["param"] == "messages"


class TestAgentHistory:
    def test_tool_call_history_is_accepted(self):
        """Assistant tool_calls and a role "tool" answer are rendered, not refused."""
        backend = FakeBackend()
        msgs = [{"role": "user", "content": "weather?"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
                    "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
        status, _ = call(make_test_app(backend), "POST", "/v1/chat/completions", json={**CHAT, "messages": msgs})
        assert status == 200 and b"<tool>sunny" in bytes(backend.submits[0].prompt)
