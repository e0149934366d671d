"""WorkerRegistry: who is registered, and by which message."""

from __future__ import annotations

from common import wire
from services.scheduler.workers import WorkerRegistry


class TestWorkerRegistryHeartbeat:
    def test_unknown_worker_heartbeat_registers_nothing(self):
        """A heartbeat from a worker the registry does not know (dropped, or met by an earlier
        scheduler) registers nothing: only Hello does."""
        reg = WorkerRegistry(5.0)
        assert reg.heartbeat(b"w", wire.Heartbeat(wire.Role.VERIFIER, "0", True, 0, 8), 1.0) is None
        assert reg.all() == []
        reg.hello(b"w", wire.Hello(wire.Role.VERIFIER, "0", 1, 8), 2.0)
        assert reg.heartbeat(b"w", wire.Heartbeat(wire.Role.VERIFIER, "0", True, 3, 8), 3.0).last_seen == 3.0
