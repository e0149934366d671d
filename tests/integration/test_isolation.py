"""A poison request sent straight to the scheduler fails alone (real processes, tiny models)."""

from __future__ import annotations

import pytest

from common import wire
from cluster import MAX_TOKENS, PROMPTS, reference_outputs, start_cluster, submit_all, collect, wait_workers

pytestmark = pytest.mark.timeout(300)
POISON = wire.SamplingParams(max_tokens=5, min_tokens=1, stop_token_ids=[1000000000])


class TestPoisonRequest:
    def test_poison_fails_alone_neighbours_identical(self, tmp_path):
        """The issue's poison request (stop id 1e9 with min_tokens) submitted in the same batch as four
        others ends cleanly (400 or an error finish), the others match the in-process greedy output, and
        no process dies."""
        c = start_cluster(tmp_path)
        try:
            client = c.client()
            wait_workers(client, 1, 1)
            client.submit("poison", [1, 2, 3], POISON)
            submit_all(client, "n")
            outs, finals = collect(client, "n")
            last = list(client.stream("poison", 60))[-1]
            assert (isinstance(last, wire.Rejected) and last.status == 400) or \
                (last.finish == wire.FinishReason.ERROR and "1000000000" in last.error), last
            assert outs == reference_outputs()
            assert [len(o) for o in outs] == MAX_TOKENS and all(f.finish == wire.FinishReason.LENGTH for f in finals)
            assert all(p.poll() is None for p in c.procs.values())
            client.close()
        finally:
            c.stop()
