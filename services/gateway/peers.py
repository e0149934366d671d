"""Who is calling: the client address behind trusted proxies, and the Host check.

* Addresses are normalised: an IPv4-mapped IPv6 address (``::ffff:10.0.0.1``, what a
  dual-stack socket reports) is the IPv4 address, so allowlists and rate-limit buckets
  see one client once.
* ``X-Forwarded-For`` is read only when the peer itself is in ``trusted_proxies``; then
  the right-most entry that is not a trusted proxy is the client (entries left of it can
  be forged by the client, entries right of it were added by our own proxies).
* With authentication off, a browser page can make a user's browser post to a local
  gateway (DNS rebinding); requiring a loopback ``Host`` name (or one configured in
  ``allowed_hosts``) stops that.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from services.gateway.openai_api import ApiError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


def normalise(text: str | None) -> Address | None:
    """The IP address in ``text`` (IPv4-mapped IPv6 -> IPv4); None when not an address."""
    try:
        addr = ipaddress.ip_address((text or "").strip().strip("[]"))
    except ValueError:
        return None
    mapped = getattr(addr, "ipv4_mapped", None)
    return mapped or addr


def networks(cidrs: tuple[str, ...], key: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Parse CIDRs; ValueError naming the config ``key`` for a bad entry."""
    try:
        return [ipaddress.ip_network(c, strict=False) for c in cidrs]
    except ValueError as exc:
        raise ValueError(f"invalid {key} entry: {exc}") from exc


@dataclass
class ClientResolver:
    """Maps (peer address, X-Forwarded-For) to the client's address."""

    trusted: list

    @classmethod
    def from_config(cls, cidrs: tuple[str, ...]) -> "ClientResolver":
        return cls(networks(cidrs, "trusted_proxies"))

    def _is_trusted(self, addr: Address | None) -> bool:
        return addr is not None and any(addr in net for net in self.trusted)

    def client(self, peer: str | None, forwarded_for: str | None) -> str | None:
        """The client address as text; the peer's own unless the peer is a trusted proxy."""
        addr = normalise(peer)
        if not self._is_trusted(addr) or not forwarded_for:
            return str(addr) if addr else peer
        hops = [normalise(h) for h in forwarded_for.split(",")]
        for hop in reversed(hops):
            if hop is None:  # garbage in the chain: stop believing it here
                break
            if not self._is_trusted(hop):
                return str(hop)
            addr = hop
        return str(addr)


@dataclass
class HostCheck:
    """With auth off, only loopback ``Host`` names (and ``allowed_hosts``) are served."""

    enabled: bool
    allowed: frozenset[str]

    @classmethod
    def from_config(cls, auth_on: bool, allowed_hosts: tuple[str, ...]) -> "HostCheck":
        names = {h.lower() for h in (*LOOPBACK_HOSTS, *allowed_hosts)}
        return cls(enabled=not auth_on, allowed=frozenset(names))

    def check(self, host_header: str | None) -> None:
        """Raise ApiError(403) for a Host this auth-off gateway does not answer to."""
        if not self.enabled or "*" in self.allowed:
            return
        name = _host_name(host_header or "")
        addr = normalise(name)
        if name in self.allowed or (addr is not None and addr.is_loopback):
            return
        raise ApiError(403, f"Host {name!r} is not served while authentication is off; add it to "
                       "allowed_hosts or enable api keys", type="permission_error", code="host_not_allowed")


def _host_name(header: str) -> str:
    """``example.com:8000`` -> ``example.com``; ``[::1]:8000`` -> ``::1``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header
