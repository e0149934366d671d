"""API keys, IP allowlist and rate-limit headers over HTTP."""

from __future__ import annotations

from services.gateway.keys import add_key, load_keys, revoke_key
from tests.gateway.conftest import make_test_app, serve

BODY = {"prompt": "hi", "max_tokens": 2}


def call(app, *requests):
    async def scenario(client):
        out = []
        for method, path, headers in requests:
            r = await client.request(method, path, headers=headers, json=BODY if method == "POST" else None)
            out.append((r.status, dict(r.headers), await r.json() if "json" in r.content_type else None))
        return out
    return serve(app, scenario)


class TestKeysFile:
    def test_add_stores_only_digest_and_revoke_removes(self, tmp_path):
        """The file never holds the key itself; revoke deletes the record."""
        path = tmp_path / "keys.json"
        key = add_key(path, "alice")
        assert key not in path.read_text() and [r.name for r in load_keys(path)] == ["alice"]
        assert revoke_key(path, "alice") and load_keys(path) == []


class TestAuth:
    def test_missing_and_wrong_keys_are_401(self, tmp_path):
        """No key or a wrong key gets 401 with an OpenAI error; a good key passes."""
        path = tmp_path / "keys.json"
        key = add_key(path, "alice")
        app = make_test_app(api_keys_file=str(path))
        (s1, _, b1), (s2, _, _), (s3, _, _) = call(
            app, ("POST", "/v1/completions", {}), ("POST", "/v1/completions", {"Authorization": "Bearer nope"}),
            ("POST", "/v1/completions", {"Authorization": f"Bearer {key}"}))
        assert (s1, s2, s3) == (401, 401, 200) and b1["error"]["code"] == "invalid_api_key"

    def test_revoked_key_stops_working_without_restart(self, tmp_path):
        """The keys file is re-read when it changes."""
        path = tmp_path / "keys.json"
        key = add_key(path, "alice")
        app = make_test_app(api_keys_file=str(path))
        auth = {"Authorization": f"Bearer {key}"}

        async def scenario(client):
            first = (await client.get("/v1/models", headers=auth)).status
            revoke_key(path, "alice")
            return first, (await client.get("/v1/models", headers=auth)).status
        assert serve(app, scenario) == (200, 401)

    def test_health_open_only_when_public(self, tmp_path):
        """/health and /metrics skip auth with public_health, and require it without."""
        path = tmp_path / "keys.json"
        add_key(path, "a")
        open_app = make_test_app(api_keys_file=str(path))
        closed_app = make_test_app(api_keys_file=str(path), public_health=False)
        assert [s for s, _, _ in call(open_app, ("GET", "/health", {}), ("GET", "/metrics", {}))] == [200, 200]
        assert [s for s, _, _ in call(closed_app, ("GET", "/health", {}), ("GET", "/metrics", {}))] == [401, 401]

    def test_ip_allowlist_is_403(self):
        """A client outside every allowed CIDR gets 403; loopback inside one passes."""
        denied = make_test_app(ip_allowlist=("10.0.0.0/8",))
        allowed = make_test_app(ip_allowlist=("10.0.0.0/8", "127.0.0.0/8"))
        assert call(denied, ("GET", "/v1/models", {}))[0][0] == 403
        assert call(allowed, ("GET", "/v1/models", {}))[0][0] == 200


class TestRateLimitHeaders:
    def test_requests_per_minute(self):
        """Past the per-minute request budget: 429 with Retry-After and x-ratelimit headers."""
        app = make_test_app(rate_limit_rpm=2)
        results = call(app, *[("POST", "/v1/completions", {})] * 3)
        assert [s for s, _, _ in results] == [200, 200, 429]
        ok, refused = results[0][1], results[2][1]
        assert ok["x-ratelimit-limit-requests"] == "2" and ok["x-ratelimit-remaining-requests"] == "1"
        assert int(refused["Retry-After"]) >= 1 and refused["x-ratelimit-remaining-requests"] == "0"
        assert results[2][2]["error"]["type"] == "rate_limit_error"

    def test_tokens_per_minute(self):
        """Prompt + max_tokens are charged to the token bucket."""
        app = make_test_app(rate_limit_tpm=6)  # "hi" + 2 = 4 tokens per request
        results = call(app, *[("POST", "/v1/completions", {})] * 2)
        assert [s for s, _, _ in results] == [200, 429]
        assert results[0][1]["x-ratelimit-remaining-tokens"] == "2"
