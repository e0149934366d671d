"""Token buckets in isolation, with a fake clock."""

from __future__ import annotations

import pytest

from services.gateway.openai_api import ApiError
from services.gateway.ratelimit import RateLimiter


class TestRateLimiter:
    def test_refills_over_time(self):
        """An empty bucket admits again after 60/rpm seconds."""
        now = [0.0]
        rl = RateLimiter(rpm=1, tpm=0, clock=lambda: now[0])
        rl.admit_request("a")
        with pytest.raises(ApiError) as exc:
            rl.admit_request("a")
        assert exc.value.status == 429 and exc.value.headers["Retry-After"] == "60"
        now[0] = 60.0
        rl.admit_request("a")

    def test_clients_are_independent(self):
        """Each client id has its own buckets."""
        rl = RateLimiter(rpm=1, tpm=0)
        rl.admit_request("a")
        rl.admit_request("b")

    def test_oversized_request_admitted_when_full(self):
        """A request larger than the token bucket passes once the bucket is full."""
        now = [0.0]
        rl = RateLimiter(rpm=0, tpm=100, clock=lambda: now[0])
        rl.admit("a", 500)
        with pytest.raises(ApiError):
            rl.admit("a", 1)


class TestEviction:
    def test_idle_buckets_are_dropped(self):
        """Buckets refilled completely are evicted on a later charge, at most once a minute."""
        now = [0.0]
        rl = RateLimiter(rpm=10, tpm=0, clock=lambda: now[0])
        for i in range(100):
            rl.admit_request(f"client{i}")
        assert len(rl) == 100
        now[0] = 61.0
        rl.admit_request("fresh")
        assert len(rl) == 1
