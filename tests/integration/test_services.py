"""Scheduler, draft and verifier as real processes on loopback, with tiny models."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common import wire
from cluster import MAX_TOKENS, PROMPTS, collect, reference_outputs, start_cluster, submit_all, wait_workers

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="session")
def reference() -> list[list[int]]:
    """Greedy outputs of PROMPTS from the in-process LocalEngine (the same tiny pair)."""
    return reference_outputs()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One scheduler, two drafts and two verifiers shared by the non-destructive tests."""
    c = start_cluster(tmp_path_factory.mktemp("svc"), drafts=2, verifiers=2)
    client = c.client("fixture")
    wait_workers(client, 2, 2)
    client.close()
    yield c
    c.stop()


class TestGeneration:
    def test_concurrent_requests_match_local_engine(self, cluster, reference):
        """Concurrent requests of different lengths produce the in-process greedy output."""
        client = cluster.client()
        submit_all(client, "c")
        outs, finals = collect(client, "c")
        assert outs == reference
        assert all(f.finish == wire.FinishReason.LENGTH for f in finals)
        client.close()

    def test_invalid_request_is_rejected_with_400(self, cluster):
        """An empty prompt is answered with Rejected(400)."""
        client = cluster.client()
        _, last = client.generate("bad", [], wire.SamplingParams())
        assert isinstance(last, wire.Rejected) and last.status == 400
        client.close()


class TestAbort:
    def test_abort_frees_slots_on_every_worker(self, cluster):
        """Aborting mid-generation ends the request and returns every worker's slots to 0."""
        client = cluster.client()
        client.submit("long", [3, 1, 4, 1, 5], wire.SamplingParams(max_tokens=200, ignore_eos=True))
        first = next(client.stream("long"))
        assert isinstance(first, wire.TokenDelta) and first.finish is None
        client.abort("long")
        finish = [d.finish for d in client.stream("long")][-1]
        assert finish == wire.FinishReason.ABORT
        stats = client.wait_stats(lambda s: s.running == 0 and all(w.slots_used == 0 for w in s.workers), 20)
        assert len(stats.workers) == 4
        client.close()


class TestFuzz:
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.binary(max_size=64), min_size=1, max_size=3))
    def test_scheduler_survives_garbage_frames(self, cluster, frames):
        """Random frames (and truncated valid ones) are dropped without stopping the scheduler."""
        import zmq
        valid = wire.encode(wire.Submit(request_id="fz", prompt=[1, 2], params=wire.SamplingParams()))
        from common import transport
        sock = transport.connect_dealer(zmq.Context.instance(), cluster.address, cluster.keys_dir())  # admin key
        sock.send_multipart(frames)
        sock.send(valid[: len(frames[0]) % len(valid)])
        sock.close()
        assert cluster.procs["scheduler-0"].poll() is None

    def test_scheduler_serves_after_fuzz(self, cluster, reference):
        """After the fuzzing, a request still produces the reference output."""
        client = cluster.client()
        toks, last = client.generate("after", PROMPTS[0], wire.SamplingParams(max_tokens=MAX_TOKENS[0],
                                                                                ignore_eos=True))
        assert toks == reference[0] and last.finish == wire.FinishReason.LENGTH
        client.close()


class TestOverlap:
    def test_overlap_on_keeps_output_and_uses_guesses(self, tmp_path, reference):
        """With overlap on and a draft equal to the main model, concurrent requests give the
        in-process greedy output, look-ahead trees are drafted and used, and no KV leaks."""
        c = start_cluster(tmp_path, overlap="on", draft_model_path="tiny-random:0")
        try:
            client = c.client()
            stats = wait_workers(client, 1, 1)
            assert stats.overlap
            submit_all(client, "o")
            outs, finals = collect(client, "o")
            assert outs == reference
            assert all(f.finish == wire.FinishReason.LENGTH for f in finals)
            stats = client.wait_stats(lambda s: s.running == 0 and all(w.slots_used == 0 for w in s.workers), 20)
            assert 0 < stats.guess_hits <= stats.guesses
            client.close()
        finally:
            c.stop()


class TestFailover:
    @pytest.mark.parametrize("role", ["draft", "verifier"])
    def test_kill_9_mid_generation_keeps_output_identical(self, tmp_path, reference, role):
        """kill -9 of one of two replicas mid-generation: every request completes identically."""
        c = start_cluster(tmp_path, drafts=2, verifiers=2)
        try:
            client = c.client()
            wait_workers(client, 2, 2)
            submit_all(client, "f")
            first = next(client.stream("f1"))
            client.inbox.setdefault("f1", []).insert(0, first)
            c.kill(f"{role}-0")
            outs, finals = collect(client, "f")
            assert outs == reference
            assert all(f.finish == wire.FinishReason.LENGTH for f in finals)
            client.close()
        finally:
            c.stop()

    def test_no_verifier_left_ends_requests_with_error(self, tmp_path):
        """With the only verifier gone, running requests end with finish=error."""
        c = start_cluster(tmp_path, drafts=1, verifiers=1)
        try:
            client = c.client()
            wait_workers(client, 1, 1)
            client.submit("e", [1, 2, 3], wire.SamplingParams(max_tokens=200, ignore_eos=True))
            next(client.stream("e"))
            c.kill("verifier-0")
            last = [d for d in client.stream("e", 30)][-1]
            assert last.finish == wire.FinishReason.ERROR and last.error
            client.close()
        finally:
            c.stop()
