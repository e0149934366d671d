"""EngineStatsLog: the scheduler's periodic ``engine stats`` line: interval rates, KV use and how speculation paid."""

from __future__ import annotations

from common import wire
from services.scheduler.stats_log import EngineStatsLog


def stats(running=0, waiting=0, drafts=0, nodes=0, accepted=0, used=0, total=8, tree_size=16):
    beats = [wire.Heartbeat(role=wire.Role.VERIFIER, replica="v", slots_used=used, slots_total=total),
             wire.Heartbeat(role=wire.Role.DRAFT, replica="d", slots_used=8, slots_total=8)]
    return wire.Stats(running=running, waiting=waiting, num_drafts=drafts, num_draft_tokens=nodes,
                      num_accepted_tokens=accepted, accepted_per_pos=[], tree_size=tree_size, workers=beats,
                      ready=True)


class TestEngineStatsLog:
    def test_an_interval_s_figures(self):
        """After a busy interval the line gives its token rates, queue, the verifiers' KV use (not the draft's),
        and 1 + accepted / trees as the mean accepted length; within the interval nothing is logged."""
        log = EngineStatsLog(10.0)
        assert log.observe(100.0, stats(), 0, 0) is None  # the first sample only starts the interval
        assert log.observe(105.0, stats(running=2), 300, 20) is None
        fields = log.observe(110.0, stats(running=2, waiting=1, drafts=10, nodes=80, accepted=30, used=2),
                             500, 120)
        assert fields == {"interval_s": 10.0, "prompt_tokens_per_s": 50.0, "generation_tokens_per_s": 12.0,
                          "running": 2, "waiting": 1, "kv_slots_used_pct": 25.0, "draft_trees": 10,
                          "mean_accepted_length": 4.0, "acceptance_rate": 0.375, "tree_size": 16}

    def test_idle_logs_nothing_and_plain_decoding_has_no_mal(self):
        """An interval with nothing processed, running or waiting logs nothing; one of plain decoding (no trees)
        logs its rates with the speculation figures None; interval 0 never logs."""
        log = EngineStatsLog(10.0)
        log.observe(0.0, stats(), 100, 50)
        assert log.observe(10.0, stats(), 100, 50) is None
        plain = log.observe(20.0, stats(running=1), 100, 90)
        assert plain["generation_tokens_per_s"] == 4.0 and plain["mean_accepted_length"] is None
        assert plain["acceptance_rate"] is None and plain["draft_trees"] == 0
        off = EngineStatsLog(0.0)
        assert off.observe(0.0, stats(running=1), 0, 0) is None and off.observe(99.0, stats(running=1), 9, 9) is None
