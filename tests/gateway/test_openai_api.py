"""Request validation: OpenAI-style 400s naming the parameter, then a good request."""

from __future__ import annotations

import pytest

from tests.gateway.conftest import make_test_app, serve
from tests.gateway.fakes import FakeBackend

GOOD = {"prompt": "hi", "max_tokens": 5}
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
BAD = [
    ("/v1/completions", b"{not json", None),
    ("/v1/completions", b"[1, 2]", None),
    ("/v1/completions", {**GOOD, "max_tokens": 0}, "max_tokens"),
    ("/v1/completions", {**GOOD, "max_tokens": "5"}, "max_tokens"),
    ("/v1/completions", {**GOOD, "temperature": "hot"}, "temperature"),
    ("/v1/completions", {**GOOD, "prompt": ""}, "prompt"),
    ("/v1/completions", {**GOOD, "prompt": []}, "prompt"),
    ("/v1/completions", {**GOOD, "prompt": [1, 999]}, "prompt"),
    ("/v1/completions", {**GOOD, "max_tokens": 100}, "max_tokens"),  # context is 64
    ("/v1/completions", {**GOOD, "n": 2}, "n"),
    ("/v1/completions", {**GOOD, "echo": True}, "echo"),
    ("/v1/completions", {**GOOD, "frobnicate": 1}, "frobnicate"),
    ("/v1/completions", {**GOOD, "speculation": "no"}, "speculation"),
    ("/v1/chat/completions", {**CHAT, "messages": []}, "messages"),
    ("/v1/chat/completions", {**CHAT, "response_format": {"type": "xml"}}, "response_format"),
    ("/v1/chat/completions", {**CHAT, "tools": [], "tool_choice": "required"}, "tool_choice"),
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "robot", "content": "x"}]}, "messages"),
]


class TestValidation:
    @pytest.mark.parametrize("path,body,param", BAD)
    def test_bad_request_is_400_naming_the_parameter(self, path, body, param):
        """Each malformed request gets 400 with an OpenAI error body naming the parameter."""
        backend = FakeBackend()

        async def scenario(client):
            kw = {"data": body, "headers": {"Content-Type": "application/json"}} if isinstance(body, bytes) \
                else {"json": body}
            r = await client.post(path, **kw)
            return r.status, await r.json()
        status, body_out = serve(make_test_app(backend), scenario)
        assert status == 400
        assert set(body_out["error"]) == {"message", "type", "param", "code"}
        assert body_out["error"]["param"] == param
        assert backend.submits == []

    def test_good_request_after_bad_ones_succeeds(self):
        """A valid request maps every parameter onto SamplingParams."""
        backend = FakeBackend()

        async def scenario(client):
            await client.post("/v1/completions", json={**GOOD, "n": 3})
            r = await client.post("/v1/completions", json={
                **GOOD, "temperature": 0.5, "top_p": 0.9, "top_k": 7, "seed": 3, "stop_token_ids": [5],
                "min_tokens": 1, "presence_penalty": 0.1, "frequency_penalty": 0.2, "repetition_penalty": 1.1,
                "logprobs": 2, "speculation": False})
            return r.status, await r.json()
        status, body = serve(make_test_app(backend), scenario)
        assert status == 200 and body["choices"][0]["text"] == "hello world"
        p = backend.submits[0].params
        assert (p.max_tokens, p.temperature, p.top_p, p.top_k, p.seed, p.logprobs) == (5, 0.5, 0.9, 7, 3, 2)
        assert p.stop_token_ids == [5, 256] and p.min_tokens == 1 and p.repetition_penalty == 1.1
        assert backend.submits[0].prompt == list(b"hi") and p.speculate is False

    def test_chat_template_applied_once(self):
        """Chat prompts are the template's text tokenized without extra special tokens."""
        backend = FakeBackend()

        async def scenario(client):
            return (await client.post("/v1/chat/completions", json={**CHAT, "max_tokens": None})).status
        assert serve(make_test_app(backend), scenario) == 200
        submit = backend.submits[0]
        assert bytes(submit.prompt).decode() == "<user>hi\n<assistant>"
        assert submit.params.max_tokens == 64 - len(submit.prompt)  # default: the rest of the context
