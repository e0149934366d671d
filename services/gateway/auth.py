"""Bearer API keys and the client IP allowlist.

Keys are checked against the SHA-256 digests of the keys file with
``hmac.compare_digest`` (every stored digest is compared, so timing reveals nothing about
which one matched); the file is re-read when it changes, so ``treespec keys revoke``
takes effect without a restart. Clients outside ``ip_allowlist`` get 403.
"""

from __future__ import annotations

import hmac
from pathlib import Path

from services.gateway.keys import KeyRecord, digest, load_keys
from services.gateway.openai_api import ApiError
from services.gateway.peers import networks, normalise


class KeyStore:
    """The keys file's digests, reloaded on change. Empty path = authentication off."""

    def __init__(self, path: str):
        self._path = Path(path) if path else None
        self._stamp: tuple[float, int] | None = None
        self._records: list[KeyRecord] = []

    @property
    def enabled(self) -> bool:
        return self._path is not None

    def lookup(self, key: str) -> str | None:
        """The name of ``key`` when valid, else None."""
        wanted, found = digest(key).encode(), None
        for r in self._current():
            if hmac.compare_digest(r.sha256.encode(), wanted):
                found = r.name
        return found

    def _current(self) -> list[KeyRecord]:
        try:
            st = self._path.stat()
            stamp = (st.st_mtime, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp:
            self._records, self._stamp = (load_keys(self._path) if stamp else []), stamp
        return self._records


def authenticate(store: KeyStore, header: str | None) -> str | None:
    """The key name for an ``Authorization`` header; None when auth is off.

    Raises ApiError(401) for a missing or wrong key.
    """
    if not store.enabled:
        return None
    challenge = {"WWW-Authenticate": 'Bearer realm="treespec"'}  # RFC 7235: every 401 names its scheme
    scheme, _, key = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise ApiError(401, "missing API key: send 'Authorization: Bearer <key>'",
                       type="authentication_error", code="invalid_api_key", headers=challenge)
    name = store.lookup(key.strip())
    if name is None:
        raise ApiError(401, "invalid API key", type="authentication_error", code="invalid_api_key",
                       headers=challenge)
    return name


class IpAllowlist:
    """CIDR networks allowed to connect; empty = everyone."""

    def __init__(self, cidrs: tuple[str, ...]):
        self._nets = networks(cidrs, "ip_allowlist")

    def check(self, remote: str | None) -> None:
        """Raise ApiError(403) unless ``remote`` is inside an allowed network."""
        if not self._nets:
            return
        addr = normalise(remote)
        if addr is None or not any(addr in net for net in self._nets):
            raise ApiError(403, "client address not allowed", type="permission_error", code="ip_not_allowed")
