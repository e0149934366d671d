"""What a chat request's tools, tool_choice and response_format turn into at the wire."""

from __future__ import annotations

import pytest

from tests.gateway.conftest import make_test_app, serve
from tests.gateway.fakes import FakeBackend

TOOL = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}
CHAT = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 5}


def submit(body):
    backend = FakeBackend()

    async def scenario(client):
        r = await client.post("/v1/chat/completions", json=body)
        return r.status, await r.json()
    status, out = serve(make_test_app(backend), scenario)
    return status, out, backend.submits[0] if backend.submits else None


class TestToolChoice:
    @pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "add"}}])
    def test_forced_call_is_constrained(self, choice):
        """required / a named function: decoding follows a <tool_call> grammar with the parameter schema."""
        status, _, s = submit({**CHAT, "tools": [TOOL], "tool_choice": choice})
        assert status == 200 and "<tool_call>" in s.params.grammar and '"const": "add"' in s.params.grammar

    def test_auto_is_unconstrained_and_tools_rendered(self):
        """auto: tools go into the template, decoding is free."""
        status, _, s = submit({**CHAT, "tools": [TOOL]})
        assert status == 200 and s.params.grammar is None and bytes(s.prompt).startswith(b"<tools>add")

    def test_none_hides_tools(self):
        """none: tools are neither rendered nor parsed."""
        status, _, s = submit({**CHAT, "tools": [TOOL], "tool_choice": "none"})
        assert status == 200 and b"<tools>" not in bytes(s.prompt) and s.params.grammar is None

    def test_unknown_named_function_is_400(self):
        """A named tool_choice must name one of the tools."""
        status, out, _ = submit({**CHAT, "tools": [TOOL], "tool_choice": {"type": "function",
                                                                          "function": {"name": "mul"}}})
        assert status == 400 and out["error"]["param"] == "tool_choice"


class TestResponseFormat:
    def test_json_schema_travels_as_grammar(self):
        """json_schema: the schema's grammar is in SamplingParams.grammar."""
        fmt = {"type": "json_schema", "json_schema": {"name": "r", "strict": True, "schema": {
            "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}}
        status, _, s = submit({**CHAT, "response_format": fmt})
        assert status == 200 and '"ok"' in s.params.grammar

    def test_json_object(self):
        """json_object: any JSON object."""
        status, _, s = submit({**CHAT, "response_format": {"type": "json_object"}})
        assert status == 200 and '"object"' in s.params.grammar

    def test_unfollowable_schema_is_400(self):
        """A schema the grammar compiler rejects is a 400 naming response_format."""
        fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "nonsense"}}}
        status, out, s = submit({**CHAT, "response_format": fmt})
        assert status == 400 and out["error"]["param"] == "response_format" and s is None
