"""Routes end to end with a fake backend: health, models, metrics, refusals, disconnects."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys

import aiohttp
import msgspec

from common import wire
from services.gateway.keys import add_key
from services.gateway.metric_names import METRIC_NAMES, series_names
from tests.gateway.conftest import make_test_app, serve
from tests.gateway.fakes import FakeBackend, deltas

BODY = {"prompt": "hi", "max_tokens": 10}
STATS = wire.Stats(running=1, waiting=0, num_drafts=4, num_draft_tokens=40, num_accepted_tokens=8,
                   accepted_per_pos=[3, 3, 2], tree_size=10, ready=True,
                   workers=[wire.Heartbeat(role=wire.Role.VERIFIER, replica="v0", slots_used=1, slots_total=4,
                                           prefix_cache_queries=300, prefix_cache_hits=256,
                                           prefix_cache_blocks_used=16, prefix_cache_blocks_total=64)])


def post(backend, body=BODY, path="/v1/completions"):
    async def scenario(client):
        r = await client.post(path, json=body)
        return r.status, dict(r.headers), await r.json()
    return serve(make_test_app(backend), scenario)


class TestHealth:
    def test_livez_and_readyz(self, tmp_path):
        """/livez is 200 while workers are down; /readyz is 503 until ready, then 200; both
        need no API key and ignore the IP allowlist."""
        backend = FakeBackend(ready=False, stats=STATS)

        async def scenario(client):
            live, ready1 = await client.get("/livez"), await client.get("/readyz")
            backend.ready = True
            ready2 = await client.get("/readyz")
            return live.status, ready1.status, ready2.status
        add_key(tmp_path / "keys.json", "alice")
        app = make_test_app(backend, api_keys_file=str(tmp_path / "keys.json"), public_health=False,
                            ip_allowlist=("10.9.9.0/24",))
        assert serve(app, scenario) == (200, 503, 200)

    def test_loading_then_ready(self):
        """/health is 503 + Retry-After until the scheduler says ready, then 200."""
        backend = FakeBackend(ready=False, stats=STATS)

        async def scenario(client):
            r1 = await client.get("/health")
            gen = await client.post("/v1/completions", json=BODY)
            backend.ready = True
            r2 = await client.get("/health")
            return r1.status, r1.headers.get("Retry-After"), gen.status, r2.status, await r2.json()
        s1, retry, gen, s2, body = serve(make_test_app(backend), scenario)
        assert (s1, gen, s2) == (503, 503, 200) and retry
        assert body["services"]["verifier/v0"] == "ready" and body["services"]["scheduler"] == "up"

    def test_models_lists_served_name(self):
        """/v1/models lists the served model name."""
        async def scenario(client):
            return await (await client.get("/v1/models")).json()
        body = serve(make_test_app(served_model_name="tiny"), scenario)
        assert [m["id"] for m in body["data"]] == ["tiny"]


class TestRefusals:
    def test_queue_full_is_429(self):
        """Rejected(429) from the scheduler becomes 429 with Retry-After, never 500."""
        backend = FakeBackend(script=lambda s: [wire.Rejected(request_id=s.request_id, status=429,
                                                              reason="queue full", retry_after_s=2.5)])
        status, headers, body = post(backend)
        assert status == 429 and headers["Retry-After"] == "3" and body["error"]["message"] == "queue full"

    def test_not_ready_rejection_is_503_when_streaming(self):
        """A refusal before the first token is a plain HTTP 503 even for stream=true."""
        backend = FakeBackend(script=lambda s: [wire.Rejected(request_id=s.request_id, status=503, reason="loading")])
        status, headers, _ = post(backend, {**BODY, "stream": True})
        assert status == 503 and "Retry-After" in headers

    def test_backend_error_is_503_not_fake_output(self):
        """Non-streaming: a backend failure is a 503 error body, not partial text."""
        script = lambda s: [wire.TokenDelta(request_id=s.request_id, tokens=[97], finish=wire.FinishReason.ERROR,
                                            error="boom")]
        status, _, body = post(FakeBackend(script=script))
        assert status == 503 and "boom" in body["error"]["message"]


class TestNonStreaming:
    def test_usage_and_logprobs(self):
        """Usage counts every token; logprobs have one entry per token (chat format)."""
        backend = FakeBackend(script=lambda s: deltas(s.request_id, ["ab", "c"], logprobs=True))
        body = {"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 1,
                "max_tokens": 5}
        status, _, out = post(backend, body, "/v1/chat/completions")
        assert status == 200 and out["choices"][0]["message"]["content"] == "abc"
        assert [e["token"] for e in out["choices"][0]["logprobs"]["content"]] == ["a", "b", "c"]
        assert out["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}

    def test_client_disconnect_aborts(self):
        """A client that goes away mid-request makes the gateway send Abort."""
        backend = FakeBackend(script=lambda s: deltas(s.request_id, ["a"], finish=None))  # then hangs

        async def scenario(client):
            task = asyncio.create_task(client.post("/v1/completions", json=BODY))
            for _ in range(200):
                await asyncio.sleep(0.01)
                if backend.submits:
                    break
            task.cancel()
            for _ in range(200):
                await asyncio.sleep(0.01)
                if backend.aborts:
                    break
            return backend.aborts
        assert serve(make_test_app(backend), scenario) == [backend.submits[0].request_id]


class TestMetrics:
    def test_exports_exactly_the_listed_names(self):
        """After a request, /metrics holds every listed metric and nothing else."""
        backend = FakeBackend(stats=STATS)

        async def scenario(client):
            await client.post("/v1/completions", json=BODY)
            return await (await client.get("/metrics")).text()
        text = serve(make_test_app(backend), scenario)
        names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and line[0] != "#"}
        assert names <= series_names()
        assert {n for n in METRIC_NAMES} <= {n.removesuffix("_bucket") for n in names} | {
            n.removesuffix("_count") for n in names}
        assert 'treespec:requests_total{finished_reason="length"} 1.0' in text
        assert 'treespec:http_requests_total{code="200",endpoint="/v1/completions"} 1.0' in text
        assert "treespec:mean_accepted_length 3.0" in text

    def test_answers_are_counted_by_route_and_code_and_generations_by_finish(self):
        """A 400, an unknown path, a queue-full 429 and a failed generation each add one HTTP answer
        (labelled by route, never the raw path); only admitted generations are counted by finish reason,
        so a backend failure is one `error` and one 503, not two requests."""
        failing = iter([[wire.Rejected(request_id="r", status=429, reason="queue full")],
                        [wire.TokenDelta(request_id="r", tokens=[97], finish=wire.FinishReason.ERROR, error="boom")]])
        backend = FakeBackend(script=lambda s: next(failing))

        async def scenario(client):
            statuses = [(await client.post("/v1/completions", json={"prompt": "hi", "max_tokens": -5})).status,
                        (await client.get("/v1/secret/abc")).status,
                        (await client.post("/v1/completions", json=BODY)).status,
                        (await client.post("/v1/completions", json=BODY)).status]
            return statuses, await (await client.get("/metrics")).text()
        statuses, text = serve(make_test_app(backend), scenario)
        assert statuses == [400, 404, 429, 503]
        samples = [line for line in text.splitlines() if line.startswith("treespec:") and "requests_total" in line]
        assert sorted(samples) == sorted([
            'treespec:http_requests_total{code="400",endpoint="/v1/completions"} 1.0',
            'treespec:http_requests_total{code="404",endpoint="unmatched"} 1.0',
            'treespec:http_requests_total{code="429",endpoint="/v1/completions"} 1.0',
            'treespec:http_requests_total{code="503",endpoint="/v1/completions"} 1.0',
            'treespec:requests_total{finished_reason="error"} 1.0'])

    def test_queue_time_is_the_schedulers_figure_and_a_bad_one_is_not_observed(self):
        """The first delta's queue_ms (1,500 ms) is observed once per request as 1.5 s; a NaN or negative
        figure from a misbehaving scheduler is left out and the request is still answered."""
        figures = iter([1500.0, float("nan"), -3.0])

        def script(submit):
            first, *rest = deltas(submit.request_id, ["ab", "c"])
            return [msgspec.structs.replace(first, queue_ms=next(figures)), *rest]

        async def scenario(client):
            statuses = [(await client.post("/v1/completions", json=BODY)).status for _ in range(3)]
            return statuses, await (await client.get("/metrics")).text()
        statuses, text = serve(make_test_app(FakeBackend(script=script)), scenario)
        assert statuses == [200, 200, 200]
        assert "treespec:request_queue_time_seconds_count 1.0" in text
        assert "treespec:request_queue_time_seconds_sum 1.5" in text
        assert "treespec:time_to_first_token_seconds_count 3.0" in text

    def test_client_that_leaves_is_counted_499_and_abort(self):
        """A client that disconnects before a non-streamed answer is HTTP 499 and a generation ended by abort."""
        backend = FakeBackend(script=lambda s: deltas(s.request_id, ["a"])[:0])  # never finishes

        async def scenario(client):
            with contextlib.suppress(asyncio.TimeoutError):
                await client.post("/v1/completions", json=BODY, timeout=aiohttp.ClientTimeout(total=0.3))
            for _ in range(100):
                text = await (await client.get("/metrics")).text()
                if "499" in text:
                    return text
                await asyncio.sleep(0.02)
            return text
        text = serve(make_test_app(backend), scenario)
        assert 'treespec:http_requests_total{code="499",endpoint="/v1/completions"} 1.0' in text
        assert 'treespec:requests_total{finished_reason="abort"} 1.0' in text

    def test_prefix_cache_per_worker(self):
        """Each worker's prefix-cache query/hit tokens and blocks are exported with its labels."""
        backend = FakeBackend(stats=STATS)

        async def scenario(client):
            return await (await client.get("/metrics")).text()
        text = serve(make_test_app(backend), scenario)
        labels = '{replica="v0",service="verifier"}'
        for line in (f"treespec:prefix_cache_queries_total{labels} 300.0",
                     f"treespec:prefix_cache_hits_total{labels} 256.0",
                     f"treespec:prefix_cache_blocks_used{labels} 16.0",
                     f"treespec:prefix_cache_blocks_capacity{labels} 64.0"):
            assert line in text


class TestTorchFree:
    def test_gateway_does_not_import_torch(self):
        """Importing the gateway (and its CLI entry points) never imports torch."""
        code = ("import sys, services.gateway.main, services.gateway.keys, treespec.cli; "
                "treespec.cli.build_parser('gateway'); treespec.cli.build_parser('keys'); "
                "sys.exit('torch' in sys.modules)")
        assert subprocess.run([sys.executable, "-c", code]).returncode == 0


class TestAbuse:
    def test_rate_limited_client_is_refused_before_parsing(self):
        """A client out of requests gets 429 for a huge malformed body, which is never parsed."""
        async def scenario(client):
            ok = await client.post("/v1/completions", json=BODY)
            junk = await client.post("/v1/completions", data=b"[" * 500_000,
                                     headers={"Content-Type": "application/json"})
            return ok.status, junk.status
        assert serve(make_test_app(rate_limit_rpm=1), scenario) == (200, 429)

    def test_rejections_are_logged(self):
        """Every refused request leaves one ``request rejected`` log line (status, type, param, path; the
        message cut to LOGGED_MESSAGE_CHARS), as an access log would, and is counted by status."""
        from structlog.testing import capture_logs

        from services.gateway.app import LOGGED_MESSAGE_CHARS

        async def scenario(client):
            bad = await client.post("/v1/completions", json={"prompt": "hi", "max_tokens": -5})
            junk = await client.post("/v1/completions", data=b"{", headers={"Content-Type": "application/json"})
            long = await client.post("/v1/completions", json={"prompt": "hi", "x" * 1000: 1})
            return bad.status, junk.status, long.status
        with capture_logs() as logs:
            assert serve(make_test_app(), scenario) == (400, 400, 400)
        rejected = [e for e in logs if e["event"] == "request rejected"]
        assert [(e["status"], e["path"]) for e in rejected] == [(400, "/v1/completions")] * 3
        assert rejected[0]["param"] == "max_tokens" and rejected[0]["error_type"] == "invalid_request_error"
        assert "JSON" in rejected[1]["message"] and len(rejected[2]["message"]) == LOGGED_MESSAGE_CHARS

    def test_body_cap_is_413_json(self):
        """A body over max_request_bytes is a JSON 413, refused on its Content-Length."""
        async def scenario(client):
            r = await client.post("/v1/completions", data=b"x" * 5000, headers={"Content-Type": "application/json"})
            return r.status, await r.json()
        status, body = serve(make_test_app(max_request_bytes=4096), scenario)
        assert status == 413 and "4096" in body["error"]["message"]

    def test_oversized_prompt_refused_before_tokenizing(self):
        """A prompt longer than context x 32 characters is a 400 and the tokenizer never runs."""
        from tests.gateway.fakes import ByteTokenizer

        class Spy(ByteTokenizer):
            calls = 0

            def encode(self, text, add_special_tokens=True):
                Spy.calls += 1
                return super().encode(text)

        async def scenario(client):
            r = await client.post("/v1/completions", json={"prompt": "x" * (64 * 32 + 1)})
            return r.status
        assert serve(make_test_app(tokenizer=Spy()), scenario) == 400 and Spy.calls == 0

    def test_tokenizing_does_not_block_the_event_loop(self):
        """While a prompt is being tokenized, /health still answers."""
        import threading
        from tests.gateway.fakes import ByteTokenizer
        release = threading.Event()

        class Slow(ByteTokenizer):
            def encode(self, text, add_special_tokens=True):
                release.wait(10)
                return super().encode(text)

        async def scenario(client):
            gen = asyncio.ensure_future(client.post("/v1/completions", json=BODY))
            await asyncio.sleep(0.2)
            health = await asyncio.wait_for(client.get("/health"), 5)
            release.set()
            return health.status, (await gen).status
        assert serve(make_test_app(tokenizer=Slow()), scenario) == (200, 200)

    def test_proxied_clients_get_their_own_buckets(self):
        """Behind a trusted proxy, X-Forwarded-For clients are rate-limited separately."""
        async def scenario(client):
            out = []
            for ip in ("198.51.100.1", "198.51.100.2", "198.51.100.1"):
                r = await client.post("/v1/completions", json=BODY, headers={"X-Forwarded-For": ip})
                out.append(r.status)
            return out
        app = make_test_app(rate_limit_rpm=1, trusted_proxies=("127.0.0.0/8",))
        assert serve(app, scenario) == [200, 200, 429]

    def test_foreign_host_refused_with_auth_off(self):
        """With auth off a non-loopback Host is 403 (a web page cannot drive a local gateway)."""
        async def scenario(client):
            r = await client.post("/v1/completions", json=BODY, headers={"Host": "evil.example"})
            return r.status
        assert serve(make_test_app(), scenario) == 403
