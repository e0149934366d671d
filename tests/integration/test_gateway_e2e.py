"""The OpenAI HTTP API of real ``treespec up`` deployments (tiny models, loopback).

Two deployments are started once for the module: ``spec`` (tree size 4, the draft is the
main model itself so that whole trees are accepted and streamed events carry several
tokens) and ``plain`` (tree size 0, no draft). A second gateway in front of the spec
scheduler has API keys and a small rate limit; a third allows no client address.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request

import aiohttp
import openai
import pytest

from tests.integration.deployment import Deployment, http_status, start_gateway, stop_process

pytestmark = pytest.mark.timeout(300)

PROMPT = "def fibonacci(n):"
CJK_PROMPT = "你好，世界！🌍🚀 こんにちは 😀 한국어"
GREEDY = {"temperature": 0.0}
RPM = 3


@pytest.fixture(scope="module")
def deployments(tmp_path_factory):
    """(spec, plain): started together, torn down together."""
    spec = Deployment.start(tmp_path_factory.mktemp("spec"), tree_size=4)
    plain = Deployment.start(tmp_path_factory.mktemp("plain"), tree_size=0)
    try:
        yield spec.wait_ready(), plain.wait_ready()
    finally:
        spec.stop()
        plain.stop()


@pytest.fixture(scope="module")
def spec(deployments) -> Deployment:
    return deployments[0]


@pytest.fixture(scope="module")
def plain(deployments) -> Deployment:
    return deployments[1]


@pytest.fixture(scope="module")
def guarded(spec, tmp_path_factory):
    """(url, key): a keyed, rate-limited gateway; (url of a gateway that allows nobody)."""
    tmp = tmp_path_factory.mktemp("guarded")
    keys = tmp / "keys.json"
    add = subprocess.run([sys.executable, "-m", "treespec.cli", "keys", "--keys-file", str(keys), "add",
                          "--name", "e2e"], capture_output=True, text=True, check=True)
    key = add.stdout.strip()
    keyed, keyed_port = start_gateway(tmp, spec.scheduler_address, api_keys_file=str(keys),
                                      rate_limit_rpm=str(RPM))
    closed, closed_port = start_gateway(tmp, spec.scheduler_address, ip_allowlist="10.9.9.0/24")
    try:
        urls = f"http://127.0.0.1:{keyed_port}", f"http://127.0.0.1:{closed_port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (http_status(urls[0] + "/health")[0] != 200
                                               or http_status(urls[1] + "/health")[0] != 403):
            time.sleep(0.1)
        yield urls[0], key, urls[1]
    finally:
        stop_process(keyed)
        stop_process(closed)


# --- HTTP helpers -------------------------------------------------------------------------

async def _post(url: str, body: dict, headers: dict | None = None) -> tuple[int, dict, bytes]:
    async with aiohttp.ClientSession() as s:
        async with s.post(url, json=body, headers=headers or {}) as r:
            return r.status, dict(r.headers), await r.read()


def post(dep_url: str, body: dict, path: str = "/v1/completions", headers: dict | None = None):
    """(status, headers, raw body bytes)."""
    return asyncio.run(_post(dep_url + path, body, headers))


def complete(url: str, **body) -> dict:
    status, _, raw = post(url, {"prompt": PROMPT, **GREEDY, **body})
    assert status == 200, raw
    return json.loads(raw)


def sse_events(raw: bytes) -> list[bytes]:
    """The payloads of ``data: ...\\n\\n`` frames, checking the framing byte by byte."""
    assert raw.endswith(b"\n\n"), raw[-50:]
    frames = raw[:-2].split(b"\n\n")
    assert all(f.startswith(b"data: ") and b"\n" not in f for f in frames), frames
    return [f[len(b"data: "):] for f in frames]


def stream(url: str, path: str = "/v1/completions", **body) -> tuple[dict, list[dict]]:
    """(headers, JSON events) of a streamed request; asserts the [DONE] terminator."""
    status, headers, raw = post(url, {"prompt": PROMPT, **GREEDY, **body, "stream": True}, path)
    assert status == 200, raw
    events = sse_events(raw)
    assert events[-1] == b"[DONE]" and b"[DONE]" not in events[:-1]
    return headers, [json.loads(e.decode("utf-8", errors="strict")) for e in events[:-1]]


def text_of(events: list[dict]) -> str:
    return "".join(c.get("text", "") for e in events for c in e["choices"])


def finish_of(events: list[dict]) -> str | None:
    return next((c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]), None)


def chunks_of(events: list[dict]) -> list[list[str]]:
    """Token texts per streamed event (needs ``logprobs``)."""
    return [c["logprobs"]["tokens"] for e in events for c in e["choices"] if c["logprobs"]]


def slots_used(url: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=2) as r:
        lines = r.read().decode().splitlines()
    return sum(float(ln.rsplit(" ", 1)[1]) for ln in lines if ln.startswith("treespec:kv_slots_used{"))


# --- tests --------------------------------------------------------------------------------

class TestHealth:
    def test_health_goes_from_503_to_200(self, spec):
        """Polled from process start: refused, then 503 + Retry-After while loading, then 200."""
        codes = [c for c, _ in spec.health_log]
        seen = [c for i, c in enumerate(codes) if i == 0 or codes[i - 1] != c]
        assert seen[-1] == 200 and 503 in seen, seen
        assert set(seen) <= {0, 503, 200} and seen.index(503) < seen.index(200)
        assert all("Retry-After" in h for c, h in spec.health_log if c == 503)


class TestSse:
    def test_framing_headers_ids_usage_and_done(self, spec):
        """Raw SSE: event-stream headers, one id, exactly one usage event (last, choices [])."""
        headers, events = stream(spec.url, max_tokens=12, stream_options={"include_usage": True})
        assert headers["Content-Type"].startswith("text/event-stream")
        assert headers["X-Accel-Buffering"] == "no"
        assert len({e["id"] for e in events}) == 1
        with_usage = [e for e in events if e.get("usage")]
        assert len(with_usage) == 1 and events[-1] is with_usage[0] and events[-1]["choices"] == []
        assert events[-1]["usage"]["completion_tokens"] == 12
        assert finish_of(events) == "length"

    def test_stream_equals_non_stream(self, spec):
        """The same greedy request gives the same text and finish reason streamed or not."""
        whole = complete(spec.url, max_tokens=24)
        _, events = stream(spec.url, max_tokens=24)
        assert text_of(events) == whole["choices"][0]["text"]
        assert finish_of(events) == whole["choices"][0]["finish_reason"]

    def test_events_carry_several_tokens(self, spec):
        """With the main model as draft, accepted trees arrive as multi-token events."""
        _, events = stream(spec.url, max_tokens=24, logprobs=0)
        assert max(len(c) for c in chunks_of(events)) > 1


@pytest.fixture(scope="module")
def reference(spec) -> list[dict]:
    """Greedy events of PROMPT (40 tokens, EOS ignored, token texts in logprobs)."""
    return stream(spec.url, max_tokens=40, logprobs=0, ignore_eos=True)[1]


class TestStops:
    def _check_stop(self, url: str, stop: str, full: str) -> None:
        """Text ends right before ``stop``; logprobs and usage end at the token completing it."""
        expected, end = full[:full.index(stop)], full.index(stop) + len(stop)
        args = dict(max_tokens=40, ignore_eos=True, stop=[stop], logprobs=0)
        whole = complete(url, **args)
        _, events = stream(url, **args, stream_options={"include_usage": True})
        choice = whole["choices"][0]
        tokens = choice["logprobs"]["tokens"]
        assert (choice["text"], choice["finish_reason"]) == (expected, "stop")
        assert len("".join(tokens[:-1])) < end <= len("".join(tokens))
        assert whole["usage"]["completion_tokens"] == len(tokens)
        assert (text_of(events), finish_of(events)) == (expected, "stop")
        assert [t for c in chunks_of(events) for t in c] == tokens
        assert events[-1]["usage"]["completion_tokens"] == len(tokens)

    def test_stop_string_inside_one_chunk(self, spec, reference):
        """A stop string strictly inside a multi-token event truncates right before it."""
        full, pos = text_of(reference), 0
        for chunk in chunks_of(reference):
            joined = "".join(chunk)
            if len(chunk) >= 3:
                stop = chunk[1].strip() or chunk[1]
                at = full.find(stop)
                if stop and pos < at < pos + len(joined) - len(chunk[-1]):
                    return self._check_stop(spec.url, stop, full)
            pos += len(joined)
        pytest.fail(f"no event with 3+ tokens and a unique middle token: {chunks_of(reference)}")

    def test_stop_string_spanning_two_chunks(self, spec, reference):
        """A stop string made of one event's end and the next event's start is caught."""
        full, pos = text_of(reference), 0
        chunks = ["".join(c) for c in chunks_of(reference)]
        for a, b in zip(chunks, chunks[1:]):
            pos += len(a)
            stop = a[-2:] + b[:2]
            if len(a) >= 2 and len(b) >= 2 and full.find(stop) == pos - 2:
                return self._check_stop(spec.url, stop, full)
        pytest.fail("no two adjacent events to span")


class TestLengths:
    def test_max_tokens_exact_with_usage_and_logprobs(self, spec):
        """max_tokens cuts inside an accepted tree: usage == tokens == logprobs entries."""
        for n in (1, 7, 13):
            body = complete(spec.url, max_tokens=n, ignore_eos=True, logprobs=1)
            lp = body["choices"][0]["logprobs"]
            assert body["usage"]["completion_tokens"] == n == len(lp["tokens"]) == len(lp["token_logprobs"])
            assert "".join(lp["tokens"]) == body["choices"][0]["text"]
            assert body["choices"][0]["finish_reason"] == "length"
            _, events = stream(spec.url, max_tokens=n, ignore_eos=True, logprobs=1,
                               stream_options={"include_usage": True})
            assert sum(len(c) for c in chunks_of(events)) == n == events[-1]["usage"]["completion_tokens"]

    def test_stop_token_inside_a_chunk(self, spec, reference):
        """A stop_token_ids hit mid-tree ends with finish stop and nothing after that token."""
        from common.tokenizer import load_tokenizer
        tok = load_tokenizer("tiny-random:0")
        tokens = [t for c in chunks_of(reference) for t in c]
        for k in range(2, len(tokens)):
            ids = tok.encode(tokens[k], add_special_tokens=False)
            if len(ids) == 1 and tok.decode(ids) == tokens[k] and tokens[k] not in tokens[:k]:
                break
        else:
            pytest.fail(f"no single-id token to stop on in {tokens}")
        for streamed in (False, True):
            args = dict(max_tokens=40, logprobs=0, ignore_eos=True, stop_token_ids=ids)
            if streamed:
                _, evs = stream(spec.url, stream_options={"include_usage": True}, **args)
                text, finish, used = text_of(evs), finish_of(evs), evs[-1]["usage"]["completion_tokens"]
                assert evs[-2]["choices"][0]["finish_reason"] == "stop"  # then only the usage event
            else:
                body = complete(spec.url, **args)
                text, finish, used = (body["choices"][0]["text"], body["choices"][0]["finish_reason"],
                                      body["usage"]["completion_tokens"])
            assert (text, finish, used) == ("".join(tokens[:k + 1]), "stop", k + 1)


class TestUnicode:
    @pytest.mark.parametrize("which", ["plain", "spec"])
    def test_cjk_emoji_prompt_streams_valid_utf8(self, which, request):
        """Every SSE event is strict UTF-8 at tree sizes 0 and 4, and both agree."""
        dep = request.getfixturevalue(which)
        status, _, raw = post(dep.url, {"prompt": CJK_PROMPT, **GREEDY, "max_tokens": 24, "stream": True})
        assert status == 200
        for event in sse_events(raw):
            event.decode("utf-8", errors="strict")
        body = complete(dep.url, prompt=CJK_PROMPT, max_tokens=24)
        streamed = text_of([json.loads(e) for e in sse_events(raw)[:-1]])
        assert streamed == body["choices"][0]["text"]

    def test_tree_sizes_agree_on_cjk(self, spec, plain):
        """Greedy output of the CJK prompt is the same with and without speculation."""
        a = complete(spec.url, prompt=CJK_PROMPT, max_tokens=24)["choices"][0]["text"]
        b = complete(plain.url, prompt=CJK_PROMPT, max_tokens=24)["choices"][0]["text"]
        assert a == b


class TestSampling:
    def test_seeded_request_reproducible_under_concurrency(self, spec):
        """temperature 0.9 + seed 7 gives the same text alone and beside unseeded requests."""
        seeded = {"prompt": PROMPT, "temperature": 0.9, "seed": 7, "max_tokens": 20, "ignore_eos": True}

        async def together():
            async with aiohttp.ClientSession() as s:
                async def one(body):
                    async with s.post(spec.url + "/v1/completions", json=body) as r:
                        return (await r.json())["choices"][0]["text"]
                noise = [{**seeded, "seed": None, "prompt": f"{PROMPT} {i}"} for i in range(3)]
                outs = await asyncio.gather(one(seeded), *(one(b) for b in noise), one(seeded))
                return outs[0], outs[-1]

        alone = complete(spec.url, **seeded)["choices"][0]["text"]
        assert asyncio.run(together()) == (alone, alone)

    @pytest.mark.parametrize("pens", [
        {"presence_penalty": -2.0, "frequency_penalty": -2.0, "repetition_penalty": 0.5},
        {"repetition_penalty": 0.5},
        {"presence_penalty": 2.0, "frequency_penalty": 1.0, "repetition_penalty": 1.8}])
    def test_penalties_same_with_and_without_speculation(self, spec, plain, pens):
        """Greedy + presence/frequency/repetition penalties: tree 4 gives tree 0's text."""
        body = {"prompt": "a a a a a a a a", "max_tokens": 16, "ignore_eos": True, **pens}
        with_spec = complete(spec.url, **body)["choices"][0]["text"]
        assert with_spec == complete(plain.url, **body)["choices"][0]["text"]

    def test_penalties_change_the_output(self, spec):
        """Penalties that reward repetition (the only kind this random model's margins feel
        within 16 tokens) change the greedy text."""
        body = {"prompt": "a a a a a a a a", "max_tokens": 16, "ignore_eos": True}
        base = complete(spec.url, **body)["choices"][0]["text"]
        assert complete(spec.url, **body, repetition_penalty=0.5)["choices"][0]["text"] != base


class TestAccess:
    def test_missing_and_wrong_key_401(self, guarded):
        """No key / a wrong key: 401 with an OpenAI error body and WWW-Authenticate."""
        url, key, _ = guarded
        for headers in ({}, {"Authorization": "Bearer tsk-wrong"}):
            status, h, raw = post(url, {"prompt": PROMPT, "max_tokens": 1}, headers=headers)
            assert status == 401 and json.loads(raw)["error"]["code"] == "invalid_api_key"
            assert h["WWW-Authenticate"].startswith("Bearer")

    def test_ip_not_allowed_403(self, guarded):
        """A client outside ip_allowlist gets 403."""
        status, _, raw = post(guarded[2], {"prompt": PROMPT, "max_tokens": 1})
        assert status == 403 and json.loads(raw)["error"]["type"] == "permission_error"

    def test_rate_limit_429_with_headers(self, guarded):
        """With a valid key, request RPM+1 within a minute gets 429 + Retry-After."""
        url, key, _ = guarded
        auth = {"Authorization": f"Bearer {key}"}
        answers = [post(url, {"prompt": PROMPT, "max_tokens": 1}, headers=auth) for _ in range(RPM + 1)]
        assert [a[0] for a in answers] == [200] * RPM + [429]
        assert answers[0][1]["x-ratelimit-limit-requests"] == str(RPM)
        assert int(answers[-1][1]["Retry-After"]) >= 1
        assert answers[-1][1]["x-ratelimit-remaining-requests"] == "0"


class TestRobustness:
    def test_client_disconnect_frees_slots(self, spec):
        """Dropping a long stream after two events returns every KV slot: none leaks (the 30 s bound only
        keeps a loaded CI machine from failing a correct run; a leaked slot never comes back)."""
        async def drop():
            async with aiohttp.ClientSession() as s:
                body = {"prompt": PROMPT, "max_tokens": 200, "ignore_eos": True, "stream": True}
                async with s.post(spec.url + "/v1/completions", json=body) as r:
                    await r.content.readuntil(b"\n\n")
                    await r.content.readuntil(b"\n\n")
        asyncio.run(drop())
        deadline = time.monotonic() + 30.0
        while slots_used(spec.url) > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert slots_used(spec.url) == 0

    @pytest.mark.parametrize("raw", [b"{not json", b'{"prompt": "x", "bogus": 1}', b'{"prompt": ""}',
                                     b'{"prompt": [999999999]}', b'{"prompt": "x", "n": 2}',
                                     b'{"prompt": "x", "temperature": 3}', b'{"prompt": "x", "max_tokens": 100000}',
                                     b"[]"])
    def test_bad_input_400_then_next_request_succeeds(self, spec, raw):
        """A malformed request is answered 400 (OpenAI error body) and the next one works."""
        async def send():
            async with aiohttp.ClientSession() as s:
                async with s.post(spec.url + "/v1/completions", data=raw,
                                  headers={"Content-Type": "application/json"}) as r:
                    return r.status, await r.json()
        status, body = asyncio.run(send())
        assert status == 400 and body["error"]["type"] == "invalid_request_error"
        assert complete(spec.url, max_tokens=2)["usage"]["completion_tokens"] >= 1


class TestOpenAiClient:
    def test_completions_stream_and_not(self, spec):
        """openai.completions.create, both modes, give the same text."""
        client = openai.OpenAI(base_url=spec.url + "/v1", api_key="unused", max_retries=0)
        whole = client.completions.create(model="treespec", prompt=PROMPT, max_tokens=12, temperature=0)
        parts = client.completions.create(model="treespec", prompt=PROMPT, max_tokens=12, temperature=0,
                                          stream=True, stream_options={"include_usage": True})
        chunks = list(parts)
        assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
        assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens == 12

    def test_chat_stream_and_not(self, spec):
        """openai.chat.completions.create, both modes, give the same content."""
        client = openai.OpenAI(base_url=spec.url + "/v1", api_key="unused", max_retries=0)
        msgs = [{"role": "user", "content": "Write hello world 你好"}]
        whole = client.chat.completions.create(model="treespec", messages=msgs, max_tokens=12, temperature=0)
        parts = list(client.chat.completions.create(model="treespec", messages=msgs, max_tokens=12,
                                                    temperature=0, stream=True))
        assert parts[0].choices[0].delta.role == "assistant"
        assert "".join(p.choices[0].delta.content or "" for p in parts) == whole.choices[0].message.content
        assert whole.choices[0].finish_reason == parts[-1].choices[0].finish_reason
