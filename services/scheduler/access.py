"""Which role may send which message to the scheduler. Pure, torch-free.

Under CURVE every message arrives stamped with the role of the sender's key (the ZAP
User-Id, see common/control_keys.py). A message its role may not send is refused and its
sender dropped: only draft keys send draft results, only verifier keys verify results,
a worker's Hello/Heartbeat must claim its key's role, and only gateway (or admin) keys
submit and abort. Ownership (a gateway aborts only its own requests; admin any) is
checked by the loop, which knows who submitted what, also on a plaintext control plane.
"""

from __future__ import annotations

from common import wire

GATEWAY_LIKE = frozenset({"gateway", "admin"})
SENDERS: dict[type, frozenset[str]] = {
    wire.DraftResult: frozenset({"draft"}),
    wire.VerifyResult: frozenset({"verifier"}),
    wire.Submit: GATEWAY_LIKE,
    wire.Abort: GATEWAY_LIKE,
}


def refusal(key_role: str | None, msg: wire.Message) -> str | None:
    """Why a peer whose key has ``key_role`` may not send ``msg`` (None: allowed).

    ``key_role`` None means a plaintext control plane (no keys): every role is trusted."""
    if key_role is None:
        return None
    if isinstance(msg, (wire.Hello, wire.Heartbeat)):
        claimed = msg.role.value if msg.role is not None else None
        if claimed in ("draft", "verifier") and claimed != key_role:
            return f"a {key_role or 'unknown'} key cannot act as a {claimed}"
        if claimed == "gateway" and key_role not in GATEWAY_LIKE:
            return f"a {key_role or 'unknown'} key cannot act as a gateway"
        return None
    allowed = SENDERS.get(type(msg))
    if allowed is None:
        return f"{type(msg).__name__} is never sent to the scheduler"
    if key_role not in allowed:
        return f"a {key_role or 'unknown'} key cannot send {type(msg).__name__}"
    return None
