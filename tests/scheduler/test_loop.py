"""services.scheduler.loop helpers: unique replica labels in the Stats the gateways export."""

from __future__ import annotations

from common import wire
from services.scheduler.loop import unique_replicas


class TestUniqueReplicas:
    def test_duplicate_labels_get_identity_suffix(self):
        """Two live workers of one role with the same replica name are told apart by their
        ZeroMQ identity; distinct names and other roles are left alone."""
        beats = [wire.Heartbeat(role=wire.Role.DRAFT, replica="0"), wire.Heartbeat(role=wire.Role.DRAFT, replica="0"),
                 wire.Heartbeat(role=wire.Role.VERIFIER, replica="0"), wire.Heartbeat(role=wire.Role.DRAFT, replica="host-b")]
        out = unique_replicas(beats, ["0080000041", "0080000042", "0080000043", "0080000044"])
        assert [hb.replica for hb in out] == ["0-80000041", "0-80000042", "0", "host-b"]
        assert len({(hb.role, hb.replica) for hb in out}) == 4
