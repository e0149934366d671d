"""Scheduler core: admission, round entries, and exact truncation of committed chunks."""

import pytest

from common import wire
from common.tree import TokenTree
from common.wire import FinishReason
from services.scheduler.core import DRAFT_SINK_TOKENS, AdmissionError, Placement, SchedulerCore, draft_gap

EOS = 99
TREE_TOKENS = [5, 6, 7, 8]  # a chain: node i is the child of node i - 1
TREE = wire.tree_to_wire(TokenTree.build(TREE_TOKENS, [-1, 0, 1, 2]))


def _running(core, prompt=(1, 2, 3), rid="r", **params):
    core.submit(wire.Submit(request_id=rid, prompt=list(prompt), params=wire.SamplingParams(**params)))
    core.admit()
    return core.running[rid]


def _core(max_model_len=100):
    return SchedulerCore(max_running=4, max_queue=2, max_model_len=max_model_len, eos_ids={EOS})


def _commit(core, seq, tokens, accepted, bonus, logprobs=None):
    return core.commit(seq, tokens, wire.VerifyOut(accepted=accepted, bonus=bonus, logprobs=logprobs))


class TestCommitTruncation:
    def test_whole_chunk(self):
        """Without a stop, accepted tokens and the bonus are all committed."""
        core = _core()
        seq = _running(core, max_tokens=10)
        d = _commit(core, seq, TREE_TOKENS, [0, 1, 2], 42)
        assert d.tokens == [5, 6, 7, 42] and d.finish is None and seq.output == [5, 6, 7, 42]

    def test_eos_inside_chunk(self):
        """EOS inside the accepted path ends the request there: nothing after it is returned."""
        core = _core()
        seq = _running(core, max_tokens=10)
        d = _commit(core, seq, [5, EOS, 7, 8], [0, 1, 2], 42)
        assert d.tokens == [5, EOS] and d.finish == FinishReason.STOP
        assert seq.output == [5, EOS] and "r" not in core.running

    def test_eos_as_bonus(self):
        """An EOS bonus token is returned and stops the request."""
        core = _core()
        seq = _running(core, max_tokens=10)
        assert _commit(core, seq, TREE_TOKENS, [0], EOS).tokens == [5, EOS]
        assert seq.finish == FinishReason.STOP

    def test_stop_token_id(self):
        """A request's stop token id truncates exactly like EOS."""
        core = _core()
        seq = _running(core, max_tokens=10, stop_token_ids=[6])
        d = _commit(core, seq, TREE_TOKENS, [0, 1, 2, 3], 42)
        assert d.tokens == [5, 6] and d.finish == FinishReason.STOP

    def test_max_tokens_crossed(self):
        """A chunk crossing max_tokens is cut at max_tokens with finish LENGTH."""
        core = _core()
        seq = _running(core, max_tokens=3)
        assert _commit(core, seq, TREE_TOKENS, [0], 42).tokens == [5, 42]
        d = _commit(core, seq, [60, 61, 62], [0, 1, 2], 43)
        assert d.tokens == [60] and d.finish == FinishReason.LENGTH and len(seq.output) == 3

    def test_min_tokens(self):
        """A stop token before min_tokens output tokens does not end the request; one at or
        after min_tokens does."""
        core = _core()
        seq = _running(core, max_tokens=10, min_tokens=4, stop_token_ids=[7])
        d = _commit(core, seq, [EOS, 6, 7, 8], [0, 1, 2, 3], 42)
        assert d.tokens == [EOS, 6, 7, 8, 42] and d.finish is None
        d = _commit(core, seq, [7, 1], [0, 1], 2)
        assert d.tokens == [7] and d.finish == FinishReason.STOP

    def test_ignore_eos(self):
        """ignore_eos keeps generating through EOS (stop token ids still apply)."""
        core = _core()
        seq = _running(core, max_tokens=10, ignore_eos=True, stop_token_ids=[8])
        d = _commit(core, seq, [EOS, 6, 8], [0, 1, 2], 42)
        assert d.tokens == [EOS, 6, 8] and d.finish == FinishReason.STOP

    def test_logprobs_truncated(self):
        """Logprobs are cut to the kept tokens."""
        core = _core()
        seq = _running(core, max_tokens=2)
        lps = [wire.TokenLogprob(logprob=-float(i)) for i in range(4)]
        d = _commit(core, seq, TREE_TOKENS, [0, 1, 2], 42, lps)
        assert d.tokens == [5, 6] and d.logprobs == lps[:2]


class TestRoundEntries:
    def test_workers_receive_only_new_tokens(self):
        """After a commit the verifier is sent only the bonus and the draft the whole chunk."""
        core = _core()
        seq = _running(core, max_tokens=10)
        d = core.draft_seq(seq, 16, 4)
        v = core.verify_seq(seq, TREE)
        assert (d.prefix_len, d.new_tokens, v.prefix_len, v.new_tokens) == (0, [1, 2, 3], 0, [1, 2, 3])
        _commit(core, seq, TREE_TOKENS, [0, 1], 42)
        d, v = core.draft_seq(seq, 16, 4), core.verify_seq(seq, TREE)
        assert (d.prefix_len, d.new_tokens) == (3, [5, 6, 42])
        assert (v.prefix_len, v.new_tokens) == (5, [42])

    def test_draft_always_gets_a_root_token(self):
        """When the draft already holds every token (the verifier lost the round), the last
        token is re-sent one position earlier so the draft has a root state."""
        core = _core()
        seq = _running(core, max_tokens=10)
        core.draft_seq(seq, 16, 4)
        d = core.draft_seq(seq, 16, 4)
        assert (d.prefix_len, d.new_tokens) == (2, [3])

    def test_verify_entry_carries_the_request_seed(self):
        """Every round of a request sends its own seed (the verifier keys noise by position);
        a request without one gets a random seed once."""
        core = _core()
        a, b = _running(core, rid="a", seed=7), _running(core, rid="b")
        assert core.verify_seq(a, TREE).seed == 7
        a.output.append(1)
        assert core.verify_seq(a, TREE).seed == 7
        assert core.verify_seq(b, TREE).seed == core.verify_seq(b, TREE).seed

    def test_counters(self):
        """Speculation counters count drafted and accepted tokens per position; plain rounds are not drafts."""
        core = _core()
        seq = _running(core, max_tokens=20)
        _commit(core, seq, TREE_TOKENS, [0, 1], 42)
        _commit(core, seq, TREE_TOKENS, [0], 42)
        _commit(core, seq, [], [], 42)
        assert (core.num_drafts, core.num_draft_tokens, core.num_accepted) == (2, 8, 3)
        assert core.accepted_per_pos == [2, 1]

    def test_token_counters_for_the_engine_stats_line(self):
        """Admitted prompts count their tokens; commits count the tokens kept (not those cut by a stop)."""
        core = _core()
        seq = _running(core, prompt=(1, 2, 3, 4), max_tokens=3)
        _commit(core, seq, TREE_TOKENS, [0, 1, 2], 42)  # 4 tokens offered, max_tokens keeps 3
        assert (core.num_prompt_tokens, core.num_generated) == (4, 3)


class TestAdmission:
    @pytest.mark.parametrize("prompt,params,match", [
        ([], {}, "empty"), ([1], {"max_tokens": 0}, "max_tokens"), ([1] * 95, {"max_tokens": 10}, "context"),
    ])
    def test_bad_requests(self, prompt, params, match):
        """Empty prompts, max_tokens < 1 and over-long requests get 400."""
        with pytest.raises(AdmissionError, match=match) as e:
            _core().submit(wire.Submit(request_id="r", prompt=prompt, params=wire.SamplingParams(**params)))
        assert e.value.status == 400

    def test_queue_full_and_duplicates(self):
        """A duplicate id is 400; a full running set plus full queue is 429."""
        core = SchedulerCore(max_running=1, max_queue=1, max_model_len=100, eos_ids={EOS})
        _running(core, rid="a")
        with pytest.raises(AdmissionError) as e:
            core.submit(wire.Submit(request_id="a", prompt=[1], params=wire.SamplingParams()))
        assert e.value.status == 400
        core.submit(wire.Submit(request_id="b", prompt=[1], params=wire.SamplingParams()))
        with pytest.raises(AdmissionError) as e:
            core.submit(wire.Submit(request_id="c", prompt=[1], params=wire.SamplingParams()))
        assert e.value.status == 429

    def test_queue_time_runs_from_submit_to_admission_and_rides_on_the_deltas(self):
        """A request admitted at once waited 0 ms; one queued behind a full running set waited until a slot
        freed (the core's clock), and its deltas carry that queue time."""
        now = [100.0]
        core = SchedulerCore(max_running=1, max_queue=4, max_model_len=100, eos_ids={EOS}, clock=lambda: now[0])
        first = _running(core, rid="a", max_tokens=1)
        core.submit(wire.Submit(request_id="b", prompt=[1], params=wire.SamplingParams(max_tokens=3)))
        now[0] += 2.5
        assert core.admit() == [] and core.waiting[0].queue_ms == 0.0  # no slot yet
        assert _commit(core, first, [], [], 7).queue_ms == 0.0 and first.finish is FinishReason.LENGTH
        now[0] += 0.25
        (second,) = core.admit()
        assert second.queue_ms == pytest.approx(2750.0)
        assert _commit(core, second, [], [], 7).queue_ms == pytest.approx(2750.0)

    def test_abort(self):
        """Abort removes a running or waiting request and marks it ABORT."""
        core = SchedulerCore(max_running=1, max_queue=4, max_model_len=100, eos_ids={EOS})
        _running(core, rid="a")
        core.submit(wire.Submit(request_id="b", prompt=[1], params=wire.SamplingParams()))
        assert core.abort("b").finish == FinishReason.ABORT and not core.waiting
        assert core.abort("a").finish == FinishReason.ABORT and not core.running
        assert core.abort("zzz") is None


class TestPlacement:
    def test_transitions(self):
        """sent -> accepted -> rolled back -> lost: what a worker's KV holds for a sequence."""
        p = Placement()
        p.place("w1")
        assert (p.worker, p.held) == ("w1", 0)
        p.sent(12)
        p.accepted(10)
        assert p.held == 10
        p.rolled_back(11)  # never grows
        assert p.held == 10
        p.rolled_back(7)
        assert p.held == 7
        p.lost()
        assert (p.worker, p.held) == (None, 0)

    def test_round_entries_follow_placement(self):
        """A draft entry resends what the draft lacks (at least the last token) and marks
        it held; a verify entry starts where the verifier's placement ends."""
        core = _core()
        seq = _running(core, prompt=(1, 2, 3, 4), max_tokens=10)
        e = core.draft_seq(seq, 4, 2)
        assert (e.prefix_len, e.new_tokens, seq.draft.held) == (0, [1, 2, 3, 4], 4)
        assert core.draft_seq(seq, 4, 2).prefix_len == 3  # holds everything: resend the last token
        _commit(core, seq, TREE_TOKENS, [0, 1], 42)
        assert seq.verifier.held == 6
        v = core.verify_seq(seq, TREE)
        assert (v.prefix_len, v.new_tokens) == (6, [42])


class TestDraftContextWindow:
    def test_gap_only_for_prompts_longer_than_sink_plus_window(self):
        """A prompt that fits in sink + window is seen whole; a longer one hides its middle."""
        assert draft_gap(DRAFT_SINK_TOKENS + 100, 100) == (0, 0)
        assert draft_gap(DRAFT_SINK_TOKENS + 101, 100) == (DRAFT_SINK_TOKENS, DRAFT_SINK_TOKENS + 1)
        assert draft_gap(5000, 0) == (0, 0)  # window 0: off

    def test_draft_entries_skip_the_gap_and_shift_positions(self):
        """The first draft entry carries sink + tail of the prompt; later entries number the
        new tokens in the draft's shorter coordinates, and the backlog counts view tokens."""
        core = _core(max_model_len=200)
        prompt = list(range(1, 101))
        seq = _running(core, prompt=prompt, max_tokens=10)
        seq.draft_hidden = (4, 90)  # the draft sees prompt[:4] + prompt[90:]
        assert seq.draft_backlog() == 14
        d = core.draft_seq(seq, 16, 4)
        assert (d.prefix_len, d.new_tokens) == (0, prompt[:4] + prompt[90:])
        assert seq.draft_backlog() == 0
        _commit(core, seq, TREE_TOKENS, [0, 1], 42)
        assert seq.draft_backlog() == 3
        d = core.draft_seq(seq, 16, 4)
        assert (d.prefix_len, d.new_tokens) == (14, [5, 6, 42])
        v = core.verify_seq(seq, TREE)
        assert (v.prefix_len, v.new_tokens) == (102, [42])  # the verifier sees every token

    def test_a_lost_draft_resends_the_view_from_the_start(self):
        """After the draft lost its KV, the next entry re-prefills the whole view (sink + tail +
        output), not the hidden middle."""
        core = _core(max_model_len=200)
        prompt = list(range(1, 101))
        seq = _running(core, prompt=prompt, max_tokens=10)
        seq.draft_hidden = (4, 90)
        core.draft_seq(seq, 16, 4)
        _commit(core, seq, TREE_TOKENS, [0], 42)
        seq.draft.lost()
        d = core.draft_seq(seq, 16, 4)
        assert (d.prefix_len, d.new_tokens) == (0, prompt[:4] + prompt[90:] + [5, 42])

    def test_the_verifier_loss_resend_is_numbered_in_the_draft_view(self):
        """When the draft already holds every token, the last token is re-sent one position
        earlier in the draft's (shorter) numbering."""
        core = _core(max_model_len=200)
        seq = _running(core, prompt=list(range(1, 101)), max_tokens=10)
        seq.draft_hidden = (4, 90)
        core.draft_seq(seq, 16, 4)
        d = core.draft_seq(seq, 16, 4)
        assert (d.prefix_len, d.new_tokens) == (13, [100])
