"""Which key role may send which message to the scheduler."""

from __future__ import annotations

import pytest

from common import wire
from services.scheduler.access import refusal

PARAMS = wire.SamplingParams()
MESSAGES = {
    "submit": wire.Submit(request_id="r", prompt=[1], params=PARAMS),
    "abort": wire.Abort(request_id="r"),
    "draft_result": wire.DraftResult(round=1, trees={}),
    "verify_result": wire.VerifyResult(round=1, outs={}),
    "hello_verifier": wire.Hello(role=wire.Role.VERIFIER, replica="x", pid=1, slots_total=1000),
    "hello_draft": wire.Hello(role=wire.Role.DRAFT, replica="x", pid=1, slots_total=8),
    "hello_gateway": wire.Hello(role=wire.Role.GATEWAY, replica="x", pid=1),
    "beat_verifier": wire.Heartbeat(role=wire.Role.VERIFIER, replica="x"),
    "stats": wire.Stats(running=0, waiting=0, num_drafts=0, num_draft_tokens=0, num_accepted_tokens=0, accepted_per_pos=[], tree_size=0, workers=[], ready=True),
}
ALLOWED = {
    "gateway": {"submit", "abort", "hello_gateway"},
    "admin": {"submit", "abort", "hello_gateway"},
    "draft": {"hello_draft", "draft_result"},
    "verifier": {"hello_verifier", "beat_verifier", "verify_result"},
    "": set(),  # an authorized key filed under no known role
}


class TestRefusal:
    @pytest.mark.parametrize("role", sorted(ALLOWED))
    def test_role_matrix(self, role):
        """Each role may send exactly its own messages; everything else is refused with a reason."""
        allowed = {name for name, msg in MESSAGES.items() if refusal(role, msg) is None}
        assert allowed == ALLOWED[role]

    def test_gateway_key_as_verifier_names_both_roles(self):
        """The refusal of a gateway key saying Hello as a verifier names both roles."""
        assert refusal("gateway", MESSAGES["hello_verifier"]) == "a gateway key cannot act as a verifier"

    def test_plaintext_trusts_everything(self):
        """Without keys (insecure_control_plane) the role check passes every message."""
        assert all(refusal(None, m) is None for m in MESSAGES.values())
