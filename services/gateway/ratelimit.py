"""Per-client token buckets: requests per minute and tokens per minute.

A request costs 1 from the request bucket and (prompt tokens + max_tokens) from the token
bucket. A cost larger than the whole bucket is admitted when the bucket is full (and
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

    def admit(self, client: str, tokens: int) -> dict[str, str]:
        """Charge one request of ``tokens``; return the headers, or raise ApiError(429)."""
        now = self.clock()
        charges = [(kind, limit, cost) for kind, limit, cost in
                   (("requests", self.rpm, 1), ("tokens", self.tpm, tokens)) if limit > 0]
        buckets = [(kind, cost, self._bucket(client, kind, limit, now)) for kind, limit, cost in charges]
        wait = max((b.wait_s(cost) for _, cost, b in buckets), default=0.0)
        if wait > 0:
            raise ApiError(429, f"rate limit exceeded; retry in {math.ceil(wait)} s", type="rate_limit_error",
                           code="rate_limit_exceeded",
                           headers={**_headers(buckets), "Retry-After": str(math.ceil(wait))})
        for _, cost, b in buckets:
            b.level -= cost
        return _headers(buckets)

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
