"""The scheduler's debug-level step events, and scripts/message_hops.py reading them from a real deployment."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
from http_run_rounds import events  # noqa: E402
from message_hops import hop_times  # noqa: E402

from tests.cli.test_launcher import _sse_stream  # noqa: E402
from tests.integration.deployment import Deployment  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def test_debug_log_times_every_step_message(tmp_path):
    """With log_level=debug every draft and verify step result the scheduler handles matches a step it
    logged as sent (same kind, round and worker), and message_hops gives non-negative message and scheduler
    times for both kinds of step; at the default level neither event is written."""
    body = {"prompt": "def f(x):", "max_tokens": 24, "temperature": 0.0, "ignore_eos": True}
    logs = {}
    for name, settings in (("debug", {"log_level": "debug"}), ("info", {})):
        (tmp_path / name).mkdir()
        dep = Deployment.start(tmp_path / name, tree_size=4, **settings).wait_ready()
        try:
            assert list(_sse_stream(dep.url, body))[-1] == "[DONE]"
        finally:
            dep.stop()
        logs[name] = dep.log_dir / "scheduler-0.log"
    sent, results = events(logs["debug"], "step sent"), events(logs["debug"], "step result")
    assert {e["step"] for e in sent} == {"DraftStep", "VerifyStep"}
    keys = [(e["step"].removesuffix("Step"), e["round"], e["worker"]) for e in sent]
    answered = [(e["step"].removesuffix("Result"), e["round"], e["worker"]) for e in results]
    assert set(answered) <= set(keys) and len(keys) - len(answered) <= 1  # a last look-ahead draft may be unanswered
    hops = hop_times(sent, results, max_ms=1e9)
    assert set(hops) == {"messages DraftStep", "messages VerifyStep", "scheduler after DraftResult",
                         "scheduler after VerifyResult"}
    assert all(v and min(v) >= 0 for v in hops.values()), hops
    assert not events(logs["info"], "step sent") and events(logs["info"], "round")
