"""A CURVE-encrypted ``treespec up`` deployment (tiny models, loopback) and rogue peers.

Every service of the deployment must use the keys in ``curve_dir`` (the deployment gets
ready only if the gateway and the workers complete the CURVE handshake with the
scheduler); a DEALER without an authorized key reaches nothing.
"""

from __future__ import annotations

import json
import stat
import time
import urllib.request

import pytest
import zmq
import zmq.auth

from common import transport, wire
from tests.integration.deployment import Deployment

pytestmark = pytest.mark.timeout(300)

ROGUE_WAIT_S = 2.0  # how long a rogue peer waits for an answer that must not come
ROGUE_ID = "rogue-submit"


def complete(url: str, prompt: str = "def f(x):", max_tokens: int = 8) -> dict:
    """POST /v1/completions (greedy) and return the JSON body; raises on a non-200."""
    body = json.dumps({"model": "treespec", "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0.0}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """``treespec up`` with tree size 4 and CURVE keys in its own temporary directory."""
    tmp = tmp_path_factory.mktemp("curve")
    dep = Deployment.start(tmp, tree_size=4, curve_dir=str(tmp / "curve"))
    try:
        yield dep.wait_ready()
    finally:
        dep.stop()


def rogue_dealer(address: str, keys_dir=None) -> zmq.Socket:
    """A DEALER with no CURVE at all, or (``keys_dir``) with its own unauthorized keypair."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    if keys_dir is not None:
        keys_dir.mkdir(exist_ok=True)
        pub, sec = zmq.auth.load_certificate(zmq.auth.create_certificates(str(keys_dir), "rogue")[1])
        server_pub, _ = zmq.auth.load_certificate(str(keys_dir.parent / "curve" / "server.key"))
        sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = pub, sec, server_pub
    sock.connect(address)
    return sock


def scheduler_log(dep: Deployment) -> str:
    return (dep.log_dir / "scheduler-0.log").read_text(errors="replace")


class TestCurveDeployment:
    def test_keys_are_created_and_secrets_private(self, deployment):
        """``treespec up`` creates server and client keypairs, authorizes the client key and keeps secrets private."""
        root = deployment.log_dir.parent / "curve"
        for name in ("server.key", "server.key_secret", "client.key", "client.key_secret", "authorized/client.key"):
            assert (root / name).is_file(), name
        for secret in root.glob("*.key_secret"):
            assert stat.S_IMODE(secret.stat().st_mode) & 0o077 == 0, secret

    def test_every_service_uses_curve(self, deployment):
        """The scheduler listens with CURVE and the gateway serves a completion through it."""
        first = json.loads(scheduler_log(deployment).splitlines()[0])
        assert first["event"] == "scheduler listening" and first["curve"] is True
        body = complete(deployment.url)
        assert body["choices"][0]["text"] and body["usage"]["completion_tokens"] == 8

    def test_authorized_client_is_served(self, deployment):
        """A client holding the deployment's client key gets its Submit answered."""
        from services.scheduler.client import SchedulerClient
        client = SchedulerClient(deployment.scheduler_address, str(deployment.log_dir.parent / "curve"), name="ok")
        try:
            toks, last = client.generate("authorized", [1, 2, 3], wire.SamplingParams(max_tokens=4, ignore_eos=True))
            assert len(toks) == 4 and last.finish == wire.FinishReason.LENGTH
        finally:
            client.close()

    @pytest.mark.parametrize("keyed", [False, True], ids=["plaintext", "unauthorized-key"])
    def test_rogue_dealer_gets_nothing(self, deployment, keyed):
        """A DEALER without the client key gets no answer, its messages are never processed, service continues."""
        sock = rogue_dealer(deployment.scheduler_address, deployment.log_dir.parent / "rogue" if keyed else None)
        try:
            rid = f"{ROGUE_ID}-{int(keyed)}"
            sock.send(transport.frame(wire.Submit(request_id=rid, prompt=[1, 2, 3],
                                                  params=wire.SamplingParams(max_tokens=4))))
            sock.send(transport.frame(wire.DraftResult(round=1, trees={}, lost=[rid])))
            sock.send(transport.frame(wire.Hello(role=wire.Role.DRAFT, replica="rogue", pid=1, slots_total=8,
                                                 max_len=256)))
            assert sock.poll(ROGUE_WAIT_S * 1e3) == 0
        finally:
            sock.close()
        assert complete(deployment.url)["usage"]["completion_tokens"] == 8
        time.sleep(0.5)
        assert "rogue" not in scheduler_log(deployment)
        assert deployment.proc.poll() is None
