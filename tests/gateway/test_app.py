"""Routes end to end with a fake backend: health, models, metrics, refusals, disconnects."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from common import wire
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
        backend = FakeBackend(script=lambda s: [wire.Rejected(s.request_id, 429, "queue full", 2.5)])
        status, headers, body = post(backend)
        assert status == 429 and headers["Retry-After"] == "3" and body["error"]["message"] == "queue full"

    def test_not_ready_rejection_is_503_when_streaming(self):
        """A refusal before the first token is a plain HTTP 503 even for stream=true."""
        backend = FakeBackend(script=lambda s: [wire.Rejected(s.request_id, 503, "loading")])
        status, headers, _ = post(backend, {**BODY, "stream": True})
        assert status == 503 and "Retry-After" in headers

    def test_backend_error_is_503_not_fake_output(self):
        """Non-streaming: a backend failure is a 503 error body, not partial text."""
        script = lambda s: [wire.TokenDelta(s.request_id, [97], finish=wire.FinishReason.ERROR, error="boom")]
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
        assert 'treespec:requests_total{status="length"} 1.0' in text
        assert "treespec:mean_accepted_length 3.0" in text

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
                     f"treespec:prefix_cache_blocks_total{labels} 64.0"):
            assert line in text


class TestTorchFree:
    def test_gateway_does_not_import_torch(self):
        """Importing the gateway (and its CLI entry points) never imports torch."""
        code = ("import sys, services.gateway.main, services.gateway.keys, treespec.cli; "
                "treespec.cli.build_parser('gateway'); treespec.cli.build_parser('keys'); "
                "sys.exit('torch' in sys.modules)")
        assert subprocess.run([sys.executable, "-c", code]).returncode == 0
