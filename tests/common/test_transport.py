"""Socket helpers: framing, CURVE authentication, and the torch-free import boundary."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import zmq

from common import transport, wire


def _pair(ctx, addr, curve_dir=""):
    router, auth = transport.bind_router(ctx, addr, curve_dir)
    return router, auth


class TestFraming:
    def test_dealer_message_arrives_as_identity_plus_one_frame(self):
        """A DEALER's message reaches the ROUTER as [identity, wire frame] and decodes."""
        ctx = zmq.Context()
        router, _ = _pair(ctx, "inproc://framing")
        dealer = transport.connect_dealer(ctx, "inproc://framing")
        dealer.send(wire.encode(wire.Abort(request_id="r1")))
        ident, msg = transport.split_router(router.recv_multipart())
        assert msg == wire.Abort(request_id="r1") and ident
        router.close(), dealer.close(), ctx.term()

    def test_extra_frames_raise_wire_error(self):
        """Three frames from a ROUTER are not a message."""
        with pytest.raises(wire.WireError):
            transport.split_router([b"id", b"a", b"b"])


class TestCurve:
    def test_only_authorized_clients_are_served(self, tmp_path):
        """With CURVE on, the authorized client key gets replies; an unknown key gets none."""
        transport.ensure_curve_keys(str(tmp_path))
        zmq.auth.create_certificates(str(tmp_path), "stranger")
        ctx = zmq.Context()
        router, auth = _pair(ctx, "tcp://127.0.0.1:*", str(tmp_path))
        addr = router.getsockopt_string(zmq.LAST_ENDPOINT)
        good = transport.connect_dealer(ctx, addr, str(tmp_path), cert="gateway")
        bad = transport.connect_dealer(ctx, addr, str(tmp_path), cert="stranger")
        for sock in (good, bad):
            sock.send(wire.encode(wire.Abort(request_id="x")))
        assert router.poll(3000)
        ident, _ = transport.split_router(router.recv_multipart())
        assert not router.poll(1000)  # the stranger's message never arrives
        router.send_multipart([ident, wire.encode(wire.Abort(request_id="ok"))])
        assert wire.decode(good.recv()) == wire.Abort(request_id="ok")
        for s in (good, bad, router):
            s.close()
        auth.stop()
        ctx.term()

    def test_secret_keys_are_private(self, tmp_path):
        """ensure_curve_keys makes the directory 0700 and every secret key owner-only."""
        transport.ensure_curve_keys(str(tmp_path / "keys"))
        assert (tmp_path / "keys").stat().st_mode & 0o777 == 0o700
        for name in ("server", "gateway", "draft", "verifier", "admin"):
            assert (tmp_path / "keys" / f"{name}.key_secret").stat().st_mode & 0o777 == transport.SECRET_MODE

    def test_router_learns_each_peers_role(self, tmp_path):
        """A pump with user_ids appends the role its key is filed under to every message."""
        transport.ensure_curve_keys(str(tmp_path))
        assert _roles_seen(str(tmp_path), {r: str(tmp_path) for r in ("draft", "verifier")}) == \
            {"draft": "draft", "verifier": "verifier"}


class TestBundles:
    def test_each_service_runs_on_its_own_bundle_without_writing(self, tmp_path):
        """Scheduler and clients started on per-service bundles (as compose and Kubernetes mount
        them) complete the handshake, the scheduler learns each role, and no key file is added."""
        from common.control_keys import write_bundle
        full = transport.ensure_curve_keys(str(tmp_path / "all"))
        dirs = {s: write_bundle(str(full), s, str(tmp_path / s)) for s in ("scheduler", "draft", "verifier")}
        before = {s: sorted(d.rglob("*")) for s, d in dirs.items()}
        got = _roles_seen(str(dirs["scheduler"]), {r: str(dirs[r]) for r in ("draft", "verifier")})
        assert got == {"draft": "draft", "verifier": "verifier"}
        assert {s: sorted(d.rglob("*")) for s, d in dirs.items()} == before

    def test_a_bundle_lacks_every_other_secret(self, tmp_path):
        """A draft's bundle holds no gateway, verifier, admin or scheduler secret key."""
        from common.control_keys import write_bundle
        full = transport.ensure_curve_keys(str(tmp_path / "all"))
        out = write_bundle(str(full), "draft", str(tmp_path / "draft"))
        assert sorted(p.name for p in out.glob("*.key_secret")) == ["draft.key_secret"]


class TestTorchFree:
    def test_scheduler_gateway_and_common_do_not_import_torch(self):
        """Importing the scheduler, gateway and common (outside common.modeling) leaves torch unloaded."""
        import pkgutil
        from pathlib import Path
        root = Path(__file__).resolve().parents[2]
        mods = ["common." + m.name for m in pkgutil.iter_modules([str(root / "common")]) if m.name != "modeling"]
        for pkg in ("services/scheduler", "services/gateway"):
            mods += [pkg.replace("/", ".") + "." + m.name for m in pkgutil.iter_modules([str(root / pkg)])]
        mods += ["services.worker", "treespec.launcher"]
        code = ("import importlib, json, sys\n"
                f"for m in {mods!r}: importlib.import_module(m)\n"
                "print(json.dumps(sorted(k for k in sys.modules if k == 'torch' or k.startswith('torch.'))))")
        out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def _roles_seen(server_dir: str, client_dirs: dict[str, str]) -> dict[str, str]:
    """Each client (role -> its key directory) sends one Abort through CURVE to a router on
    ``server_dir``'s keys; returns request id (= the role sent) -> the role the router learnt."""
    ctx = zmq.Context()
    router, auth = _pair(ctx, "tcp://127.0.0.1:*", server_dir)
    addr = router.getsockopt_string(zmq.LAST_ENDPOINT)
    pump = transport.SocketPump(ctx, router, user_ids=True)
    socks = {r: transport.connect_dealer(ctx, addr, d, cert=r) for r, d in client_dirs.items()}
    try:
        for role, sock in socks.items():
            sock.send(wire.encode(wire.Abort(request_id=role)))
        got = {}
        for _ in socks:
            frames = pump.inbox.get(timeout=5)
            got[transport.split_router(frames[:2])[1].request_id] = frames[2].decode()
        return got
    finally:
        for sock in socks.values():
            sock.close()
        pump.close()
        auth.stop()
        ctx.term()
