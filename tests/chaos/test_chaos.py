"""Chaos under ``treespec up`` (real processes, tiny models): for each of gateway, scheduler,
draft and verifier, kill -9 and SIGSTOP (10 s) during 8 concurrent greedy streams.

Every stream must end (none hung): with the fault-free text, or cleanly with an error; the
deployment must serve again and hold no KV slot afterwards.
"""

from __future__ import annotations

import pytest

from tests.integration.deployment import Deployment
from treespec import chaos

pytestmark = pytest.mark.timeout(900)
PROMPTS = [f"def f{i}(x):" for i in range(8)]
MAX_TOKENS = 40
DEADLINE_S = 90.0  # a stream not ended by then is hung
RECOVER_S = 90.0


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """One tree-speculative deployment for the whole matrix (the supervisor restarts what dies)."""
    dep = Deployment.start(tmp_path_factory.mktemp("chaos"), tree_size=4, max_running="9",  # 8 streams + probe
                           heartbeat_timeout_s="2")
    try:
        yield dep.wait_ready()
    finally:
        dep.stop()


@pytest.fixture(scope="module")
def reference(deployment) -> list[str]:
    return chaos.reference_texts(deployment.url, chaos.bodies_for(PROMPTS, MAX_TOKENS), DEADLINE_S)


def _fault(dep, service, fault, reference) -> chaos.FaultResult:
    res = chaos.run_fault(dep.proc.pid, dep.url, service, fault, chaos.bodies_for(PROMPTS, MAX_TOKENS),
                          reference, DEADLINE_S, RECOVER_S)
    print(res.row())
    return res


class TestChaos:
    @pytest.mark.parametrize("fault", chaos.FAULTS)
    def test_draft_fault_loses_nothing(self, deployment, reference, fault):
        """A dead or stopped draft worker costs no stream: all 8 finish with the fault-free text
        (plain verifier steps until a draft is back), and no slot is left held."""
        res = _fault(deployment, "draft", fault, reference)
        assert (res.identical, res.hung, res.slots_leaked) == (8, 0, 0), res
        assert res.serve_again_s >= 0

    @pytest.mark.parametrize("service", ["verifier", "scheduler", "gateway"])
    @pytest.mark.parametrize("fault", chaos.FAULTS)
    def test_fault_ends_every_stream(self, deployment, reference, service, fault):
        """Every stream ends, with the fault-free text or a clean error; none hangs; the deployment
        serves again and no KV slot stays held."""
        res = _fault(deployment, service, fault, reference)
        assert res.hung == 0, res
        assert res.identical + res.failed_clean + res.dropped == 8, res
        if service != "gateway":
            assert res.dropped == 0, res  # a live gateway always ends a stream with [DONE] or an error
        assert res.serve_again_s >= 0 and res.slots_leaked == 0, res
