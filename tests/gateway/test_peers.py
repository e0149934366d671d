"""Client addresses behind trusted proxies, IPv4-mapped addresses, and the Host check."""

from __future__ import annotations

import pytest

from services.gateway.openai_api import ApiError
from services.gateway.peers import ClientResolver, HostCheck, normalise


class TestClientResolver:
    def test_forwarded_for_ignored_from_untrusted_peer(self):
        """A client cannot pick its identity by sending X-Forwarded-For itself."""
        r = ClientResolver.from_config(("10.0.0.0/8",))
        assert r.client("203.0.113.5", "1.2.3.4") == "203.0.113.5"

    def test_rightmost_untrusted_entry_is_the_client(self):
        """Behind trusted proxies, the right-most untrusted hop is the client (left ones are forgeable)."""
        r = ClientResolver.from_config(("10.0.0.0/8",))
        assert r.client("10.0.0.2", "6.6.6.6, 198.51.100.7, 10.0.0.9") == "198.51.100.7"

    def test_all_trusted_chain_gives_leftmost(self):
        """A chain of trusted hops only resolves to its left-most address."""
        r = ClientResolver.from_config(("10.0.0.0/8",))
        assert r.client("10.0.0.2", "10.1.1.1, 10.0.0.9") == "10.1.1.1"

    def test_ipv4_mapped_peer_normalised(self):
        """::ffff:a.b.c.d is a.b.c.d, so an IPv4 CIDR matches it."""
        r = ClientResolver.from_config(("10.0.0.0/8",))
        assert normalise("::ffff:10.1.2.3") == normalise("10.1.2.3")
        assert r.client("::ffff:10.0.0.2", "198.51.100.7") == "198.51.100.7"


class TestHostCheck:
    @pytest.mark.parametrize("host", ["localhost:8000", "127.0.0.1", "[::1]:8000", "127.0.0.2:1"])
    def test_loopback_hosts_pass(self, host):
        """With auth off, loopback Host names are served."""
        HostCheck.from_config(False, ()).check(host)

    def test_other_host_refused_unless_configured(self):
        """With auth off, another Host is 403 (DNS rebinding) unless listed in allowed_hosts."""
        with pytest.raises(ApiError) as exc:
            HostCheck.from_config(False, ()).check("evil.example:8000")
        assert exc.value.status == 403
        HostCheck.from_config(False, ("api.example",)).check("api.example:8000")
        HostCheck.from_config(True, ()).check("evil.example")  # auth on: any Host
