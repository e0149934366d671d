"""Per-client token buckets: requests per minute and tokens per minute.

A request costs 1 from the request bucket, charged by :meth:`RateLimiter.admit_request`
before its body is read or parsed (so a limited client cannot make the gateway parse
big bodies), and (prompt tokens + max_tokens) from the token bucket, charged by
:meth:`RateLimiter.admit` once the prompt is tokenized. Buckets idle long enough to be
full again are dropped (a full bucket is what a new client gets anyway), at most once a
minute, so the table holds only recently active clients. A cost larger than the whole bucket is admitted when the bucket is full (and
drives it negative), so that a big request is slowed, never refused forever. A refusal is
an ApiError(429) with ``Retry-After``; every answer carries ``x-ratelimit-*`` headers.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

from services.gateway.openai_api import ApiError

MINUTE_S = 60.0


@dataclass
class Bucket:
    """``capacity`` units refilled evenly over a minute."""

    capacity: float
    level: float
    stamp: float

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.capacity / MINUTE_S)
        self.stamp = now

    def wait_s(self, cost: float) -> float:
        """Seconds until ``cost`` (capped at capacity) is available; 0 when it is now."""
        need = min(cost, self.capacity) - self.level
        return max(0.0, need * MINUTE_S / self.capacity)

    def reset_s(self) -> float:
        """Seconds until the bucket is full again."""
        return max(0.0, (self.capacity - self.level) * MINUTE_S / self.capacity)


@dataclass
class RateLimiter:
    """Buckets per client id; a limit of 0 is unlimited."""

    rpm: int
    tpm: int
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[tuple[str, str], Bucket] = field(default_factory=dict)
    _swept: float = float("-inf")

    def admit_request(self, client: str) -> dict[str, str]:
        """Charge one request (and check one token is left); headers, or ApiError(429)."""
        return self._charge(client, [("requests", self.rpm, 1), ("tokens", self.tpm, 0)])

    def admit(self, client: str, tokens: int) -> dict[str, str]:
        """Charge ``tokens`` from the token bucket; return the headers, or raise ApiError(429)."""
        return self._charge(client, [("tokens", self.tpm, tokens)])

    def __len__(self) -> int:
        return len(self._buckets)

    def _charge(self, client: str, costs: list[tuple[str, int, int]]) -> dict[str, str]:
        now = self.clock()
        self._sweep(now)
        charges = [(kind, limit, max(cost, 0)) for kind, limit, cost in costs if limit > 0]
        buckets = [(kind, cost, self._bucket(client, kind, limit, now)) for kind, limit, cost in charges]
        wait = max((b.wait_s(max(cost, 1)) for _, cost, b in buckets), default=0.0)
        if wait > 0:
            raise ApiError(429, f"rate limit exceeded; retry in {math.ceil(wait)} s", type="rate_limit_error",
                           code="rate_limit_exceeded",
                           headers={**_headers(buckets), "Retry-After": str(math.ceil(wait))})
        for _, cost, b in buckets:
            b.level -= cost
        return _headers(buckets)

    def _sweep(self, now: float) -> None:
        """Drop buckets that have refilled completely (idle for a minute or more)."""
        if now - self._swept < MINUTE_S:
            return
        self._swept = now
        idle = [k for k, b in self._buckets.items() if b.level + (now - b.stamp) * b.capacity / MINUTE_S
                >= b.capacity]
        for key in idle:
            del self._buckets[key]

    def _bucket(self, client: str, kind: str, limit: int, now: float) -> Bucket:
        b = self._buckets.setdefault((client, kind), Bucket(float(limit), float(limit), now))
        b.refill(now)
        return b


def _headers(buckets: list[tuple[str, float, Bucket]]) -> dict[str, str]:
    headers = {}
    for kind, _, b in buckets:
        headers[f"x-ratelimit-limit-{kind}"] = str(int(b.capacity))
        headers[f"x-ratelimit-remaining-{kind}"] = str(max(0, math.floor(b.level)))
        headers[f"x-ratelimit-reset-{kind}"] = f"{b.reset_s():.3g}s"
    return headers
