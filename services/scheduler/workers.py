"""Which workers are alive, what they hold, and where a sequence goes. Pure, torch-free.

Workers are keyed by their ZeroMQ identity (hex string ``key``): replica names are only
labels (two containers may both call themselves ``0``). A worker registers only with
Hello: a heartbeat from an unknown worker (a restarted scheduler never met it, or it was
dropped) registers nothing, and the loop asks that worker to say Hello again, so a stuck
worker that still heartbeats is not dropped and re-registered in a loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common import wire
from services.scheduler.prefix_index import PrefixIndex, choose

LOAD_SLACK = 0.25  # cache-aware placement may pick a worker up to this fraction of its slots busier


@dataclass
class Worker:
    """One draft or verifier process as the scheduler sees it."""

    identity: bytes
    role: wire.Role
    replica: str
    slots_total: int
    last_seen: float  # time.monotonic() seconds of the last frame from it
    heartbeat: wire.Heartbeat | None = None
    seqs: set[str] = field(default_factory=set)  # sequence ids placed on it
    devices: tuple[str, ...] = ()  # from Hello: where it computes ("cpu", "cuda:0", ...)
    prefix: PrefixIndex = field(default_factory=PrefixIndex)  # block keys its prefix cache probably holds

    @property
    def key(self) -> str:
        return self.identity.hex()

    @property
    def warmed_up(self) -> bool:
        return self.heartbeat is None or self.heartbeat.ready


class WorkerRegistry:
    """Live workers; drops those silent for ``timeout_s`` seconds."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._by_key: dict[str, Worker] = {}

    def get(self, key: str | None) -> Worker | None:
        return self._by_key.get(key) if key else None

    def of_identity(self, identity: bytes) -> Worker | None:
        return self._by_key.get(identity.hex())

    def hello(self, identity: bytes, msg: wire.Hello, now: float) -> tuple[Worker, Worker | None]:
        """Register a worker; returns (new worker, the previous record of that identity
        if it said hello again, i.e. restarted and lost its KV: its sequences must move)."""
        if msg.role == wire.Role.GATEWAY:
            raise ValueError("gateways are not workers")
        old = self._by_key.pop(identity.hex(), None)
        w = Worker(identity, msg.role, msg.replica, msg.slots_total, now, devices=tuple(msg.devices))
        self._by_key[w.key] = w
        return w, old

    def heartbeat(self, identity: bytes, hb: wire.Heartbeat, now: float) -> Worker | None:
        """Record a registered worker's heartbeat; None for an unknown peer (not registered)."""
        w = self.of_identity(identity)
        if w is None:
            return None
        w.last_seen, w.heartbeat = now, hb
        w.slots_total = hb.slots_total or w.slots_total
        w.prefix.resize(hb.prefix_cache_blocks_total)
        return w

    def touch(self, identity: bytes, now: float) -> None:
        """Any reply counts as a sign of life."""
        w = self.of_identity(identity)
        if w is not None:
            w.last_seen = now

    def expire(self, now: float) -> list[Worker]:
        """Remove and return the workers silent for more than ``timeout_s``."""
        dead = [w for w in self._by_key.values() if now - w.last_seen > self.timeout_s]
        for w in dead:
            del self._by_key[w.key]
        return dead

    def drop(self, key: str) -> Worker | None:
        return self._by_key.pop(key, None)

    def alive(self, role: wire.Role) -> list[Worker]:
        return [w for w in self._by_key.values() if w.role == role]

    def all(self) -> list[Worker]:
        return list(self._by_key.values())

    def ready(self, role: wire.Role) -> bool:
        """At least one worker of ``role`` is alive and warmed up."""
        return any(w.warmed_up for w in self.alive(role))

    def capacity(self, role: wire.Role) -> int:
        """Total KV slots (sequences) over the live workers of ``role``."""
        return sum(w.slots_total for w in self.alive(role))

    def pick(self, role: wire.Role, keys: list[int] | None = None) -> Worker | None:
        """A live worker of ``role`` with a free slot, or None: the least loaded, unless one
        within ``LOAD_SLACK`` of it probably holds a longer prefix of the sequence's block
        ``keys`` (cache-aware placement, ``prefix_index.py``)."""
        free = sorted((w for w in self.alive(role) if len(w.seqs) < w.slots_total), key=lambda w: w.key)
        return choose(free, lambda w: len(w.seqs) / max(w.slots_total, 1),
                      lambda w: w.prefix.match(keys) if keys else 0, LOAD_SLACK)
