"""Draft/verify overlap: look-ahead trees are lossless, used on a hit, rolled back on a miss.

The round driver runs against real tiny-model runners, with replies delivered in random
(per-worker FIFO) order, as the scheduler's event loop would see them.
"""

import random
from collections import deque

import numpy as np
import pytest

from common import wire
from common.config import Config
from common.tree import ROOT, TokenTree
from services.draft.runner import DraftRunner
from services.scheduler.core import DRAFT_SINK_TOKENS, SchedulerCore
from services.scheduler.overlap import common_prefix, descend, guess_path, overlap_pays, subtree_below, top_path
from services.scheduler.rounds import RoundDriver
from services.scheduler.workers import WorkerRegistry
from services.verifier.runner import VerifierRunner

EOS = 151645
PROMPTS = {"a": [17, 4, 950, 33, 8, 21, 77, 5000, 42], "b": [1, 2, 3], "c": list(range(300, 330))}
LENGTHS = {"a": 24, "b": 17, "c": 9}
DRAFT, VERIFIER = b"draft-0", b"verifier-0"


class NullLog:
    def __getattr__(self, name):
        return lambda *args, **kwargs: None


#  tokens:   10  11  12  13  14  15
#  parents: root  0 root  1   1   2      scores favour 0 -> 1 -> 3
TREE = TokenTree.build([10, 11, 12, 13, 14, 15], [ROOT, 0, ROOT, 1, 1, 2], [-0.1, -0.3, -2.0, -0.8, -0.9, -2.5])


class TestPureFunctions:
    def test_top_path_follows_best_child(self):
        """The guessed path descends by the highest cumulative score to a leaf."""
        assert top_path(TREE) == [0, 1, 3]
        assert top_path(TokenTree.empty()) == []

    def test_guess_path_stops_where_confidence_drops(self):
        """Only top-path nodes with draft path probability >= 0.5 are assumed accepted."""
        assert guess_path(TREE) == [10, 11]  # node 3: exp(-0.8) = 0.45
        assert guess_path(TokenTree.build([5], [ROOT], [-3.0])) == []

    def test_descend_follows_tokens(self):
        """Following tokens from the root reaches the matching node, or None off the tree."""
        assert descend(TREE, [10, 11, 14]) == 4
        assert descend(TREE, []) == ROOT
        assert descend(TREE, [10, 12]) is None

    def test_subtree_below_reroots(self):
        """The subtree below node 0 keeps its descendants, re-rooted and re-scored."""
        sub = subtree_below(TREE, 0)
        assert sub.tokens.tolist() == [11, 13, 14]
        assert sub.parents.tolist() == [ROOT, 0, 0]
        assert np.allclose(sub.scores, [-0.2, -0.7, -0.8])
        assert len(subtree_below(TREE, 2)) == 1

    def test_common_prefix(self):
        """Common prefix length of two token lists."""
        assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
        assert common_prefix([], [1]) == 0

    @pytest.mark.parametrize("mode,drafts,verifiers,expected", [
        ("auto", [("GPU-b",)], [("GPU-a",)], True),
        ("auto", [("GPU-a",)], [("GPU-a",)], False),  # same GPU: they would share it
        ("auto", [("cpu",)], [("cpu",)], False),  # same CPU cores (measured not to pay)
        ("auto", [("GPU-c",)], [("GPU-a", "GPU-b")], True),  # tensor-parallel verifier
        ("auto", [("GPU-b",)], [("GPU-a", "GPU-b")], False),
        ("auto", [("GPU-b",), ("GPU-b",)], [("GPU-a",)], True),  # two drafts share a GPU, not with verifiers
        ("auto", [("GPU-b",), ("GPU-a",)], [("GPU-a",)], False),
        ("auto", [()], [("GPU-a",)], False),  # unknown device: assume shared
        ("on", [("cpu",)], [("cpu",)], True),
        ("off", [("GPU-b",)], [("GPU-a",)], False),
    ])
    def test_overlap_pays(self, mode, drafts, verifiers, expected):
        """auto turns overlap on only for draft and verifiers on separate accelerators."""
        assert overlap_pays(mode, drafts, verifiers) is expected


class Harness:
    """A RoundDriver wired to a draft and a verifier runner; ``run`` delivers messages from
    per-worker FIFO queues picked at random, and results straight back to the driver."""

    def __init__(self, main, draft, overlap: str, seed: int, tree_size: int = 16, first: bool = True,
                 window: int = 0) -> None:
        # ``first``: draft in the first round too, so every round exercises the draft path.
        cfg = Config(tree_size=tree_size, max_accept_length=5, overlap=overlap, max_model_len=160,
                     speculate_first_token=first, draft_context_window=window)
        self.core = SchedulerCore(4, 16, 160, {EOS})
        reg = WorkerRegistry(1e9)
        reg.hello(DRAFT, wire.Hello(role=wire.Role.DRAFT, replica="0", pid=1, slots_total=4, max_len=256,
                                    devices=["GPU-b"]), 0.0)
        reg.hello(VERIFIER, wire.Hello(role=wire.Role.VERIFIER, replica="0", pid=2, slots_total=4, max_len=256,
                                       devices=["GPU-a"]), 0.0)
        self.driver = RoundDriver(self.core, reg, cfg, NullLog(), 1e9)
        self.runners = {DRAFT: DraftRunner(draft, 4, 256), VERIFIER: VerifierRunner(main, 4, 256)}
        self.queues = {DRAFT: deque(), VERIFIER: deque()}
        self.rng = random.Random(seed)
        self.out: dict[str, list[int]] = {}
        self.draft_steps = {"normal": 0, "guess": 0}
        self.draft_prefills: dict[str, int] = {}  # request id -> tokens of its longest draft prefill from 0

    def route(self, outs) -> None:
        for identity, msg in outs:
            if isinstance(msg, wire.TokenDelta):
                self.out.setdefault(msg.request_id, []).extend(msg.tokens)
            else:
                self.queues[identity].append(msg)

    def deliver(self, identity: bytes) -> None:
        msg, runner = self.queues[identity].popleft(), self.runners[identity]
        if isinstance(msg, wire.Free):
            runner.free(msg.seq_ids)
        elif isinstance(msg, wire.DraftStep):
            self.draft_steps["guess" if msg.guess else "normal"] += 1
            for e in msg.seqs:
                if e.prefix_len == 0:
                    self.draft_prefills[e.seq_id] = max(self.draft_prefills.get(e.seq_id, 0), len(e.new_tokens))
            self.route(self.driver.on_draft(identity, runner.step(msg), 0.0))
        else:
            self.route(self.driver.on_verify(identity, runner.step(msg), 0.0))

    def run(self, requests: dict[str, tuple[list[int], wire.SamplingParams]]) -> dict[str, list[int]]:
        for rid, (prompt, params) in requests.items():
            self.route(self.driver.submit(b"gw", wire.Submit(request_id=rid, prompt=prompt, params=params)))
        for _ in range(2000):
            self.route(self.driver.start(0.0))
            busy = [k for k, q in self.queues.items() if q]
            if not busy:
                if not (self.core.running or self.core.waiting):
                    return self.out
                raise AssertionError("driver stalled with running sequences and nothing in flight")
            self.deliver(self.rng.choice(busy))
        raise AssertionError("did not finish")

    def slots_used(self) -> dict[bytes, int]:
        return {k: r.cache.slots_used for k, r in self.runners.items()}


def greedy_requests():
    return {k: (p, wire.SamplingParams(max_tokens=LENGTHS[k], ignore_eos=True)) for k, p in PROMPTS.items()}


@pytest.fixture(scope="module")
def close_draft():
    """The main model's weights with 2% relative noise on its layers: agrees more often
    than the shared noisy draft (5%)."""
    import torch

    from common.modeling.loader import load_weights
    from common.modeling.model import DecoderModel
    spec, weights, _ = load_weights("tiny-random:0", "float32")
    g = torch.Generator().manual_seed(7)
    return DecoderModel(spec, {k: v + 0.02 * v.std() * torch.randn(v.shape, generator=g)
                               if k.startswith("layers.") and v.dim() == 2 else v
                               for k, v in weights.items()}, torch.float32)


@pytest.fixture(scope="module")
def reference(tiny_main, tiny_other_draft):
    """Greedy outputs without overlap (equal to plain decoding: speculation is lossless)."""
    return Harness(tiny_main, tiny_other_draft, "off", 0).run(greedy_requests())


class TestOverlapRounds:
    @pytest.mark.parametrize("seed", range(4))
    @pytest.mark.parametrize("draft", ["tiny_main", "tiny_noisy_draft", "tiny_other_draft"])
    def test_greedy_output_unchanged(self, request, tiny_main, reference, draft, seed):
        """With overlap on, any draft and any reply order give the non-overlapped greedy
        output, and every KV slot is free at the end."""
        h = Harness(tiny_main, request.getfixturevalue(draft), "on", seed)
        assert h.run(greedy_requests()) == reference
        assert h.driver.ahead.sent > 0 and not h.driver.ahead.guesses
        assert h.slots_used() == {DRAFT: 0, VERIFIER: 0}

    def test_perfect_draft_skips_draft_steps(self, tiny_main, reference):
        """A draft equal to the main model is always fully accepted, so every guess is used
        except each request's last (it finished) and only the first round drafts normally."""
        h = Harness(tiny_main, tiny_main, "on", 0)
        h.run(greedy_requests())
        ahead = h.driver.ahead
        assert ahead.hits >= ahead.sent - len(PROMPTS) > 0
        assert h.draft_steps["normal"] == 1

    def test_close_draft_hits_and_misses(self, tiny_main, close_draft, reference):
        """A draft that often agrees, with small trees (so the accepted path often runs past
        the tree's leaves), exercises both outcomes: some guesses used, some rolled back."""
        h = Harness(tiny_main, close_draft, "on", 1, tree_size=4)
        assert h.run(greedy_requests()) == reference
        ahead = h.driver.ahead
        assert 0 < ahead.hits < ahead.sent

    def test_off_sends_no_guesses(self, tiny_main, tiny_noisy_draft, reference):
        """overlap off (and auto on a shared CPU) sends no look-ahead steps."""
        h = Harness(tiny_main, tiny_noisy_draft, "off", 0)
        h.run(greedy_requests())
        assert h.draft_steps["guess"] == 0 and h.driver.ahead.sent == 0

    def test_sampling_runs_to_completion(self, tiny_main, tiny_noisy_draft):
        """Seeded sampling with overlap finishes every request with its max_tokens and frees all KV."""
        h = Harness(tiny_main, tiny_noisy_draft, "on", 2)
        params = wire.SamplingParams(max_tokens=15, temperature=0.8, top_p=0.9, seed=7, ignore_eos=True)
        out = h.run({k: (p, params) for k, p in PROMPTS.items()})
        assert {k: len(v) for k, v in out.items()} == {k: 15 for k in PROMPTS}
        assert h.slots_used() == {DRAFT: 0, VERIFIER: 0}

    def test_abort_during_guess_frees_everything(self, tiny_main, tiny_noisy_draft):
        """Aborting a request while its look-ahead step is in flight leaks no KV slot."""
        h = Harness(tiny_main, tiny_noisy_draft, "on", 3)
        h.route(h.driver.submit(b"gw", wire.Submit(request_id="x", prompt=PROMPTS["a"],
                                                   params=wire.SamplingParams(max_tokens=50))))
        for _ in range(200):
            h.route(h.driver.start(0.0))
            if h.driver.ahead.busy():
                break
            h.deliver(next(k for k, q in h.queues.items() if q))
        assert h.driver.ahead.busy()
        h.route(h.driver.abort("x"))
        while any(h.queues.values()):
            h.deliver(next(k for k, q in h.queues.items() if q))
            h.route(h.driver.start(0.0))
        assert h.slots_used() == {DRAFT: 0, VERIFIER: 0} and not h.driver.ahead.guesses


class TestDraftContextWindow:
    LONG = {"d": (list(range(400, 460)), wire.SamplingParams(max_tokens=20, ignore_eos=True)),
            "b": (PROMPTS["b"], wire.SamplingParams(max_tokens=12, ignore_eos=True))}

    @pytest.mark.parametrize("overlap", ["off", "on"])
    def test_a_windowed_draft_is_lossless_and_prefills_only_sink_plus_window(self, tiny_main, tiny_noisy_draft,
                                                                            overlap):
        """A draft that sees only the prompt's first DRAFT_SINK_TOKENS and last 8 tokens
        prefills exactly that many, a 3-token prompt is seen whole, the greedy output equals
        a full-context draft's, and every KV slot is free at the end."""
        full = Harness(tiny_main, tiny_noisy_draft, overlap, 0).run(self.LONG)
        h = Harness(tiny_main, tiny_noisy_draft, overlap, 0, window=8)
        assert h.run(self.LONG) == full
        assert h.draft_prefills["d"] == DRAFT_SINK_TOKENS + 8
        assert h.draft_prefills["b"] == 3  # a short prompt is seen whole
        assert h.slots_used() == {DRAFT: 0, VERIFIER: 0}


class TestDeadlines:
    def test_overdue_draft_moves_the_round_on(self, tiny_main, tiny_noisy_draft):
        """A draft reply that never comes drops that worker at the deadline and the round goes
        on to verification (the verifier's pending reply is kept), then finishes."""
        h = Harness(tiny_main, tiny_noisy_draft, "on", 0)
        h.driver.step_timeout_s = 5.0
        h.route(h.driver.submit(b"gw", wire.Submit(request_id="x", prompt=PROMPTS["a"],
                                                   params=wire.SamplingParams(max_tokens=4))))
        h.route(h.driver.start(0.0))
        assert h.driver.current.phase == wire.Role.DRAFT and h.queues[DRAFT]
        h.queues[DRAFT].clear()  # the reply is lost
        h.route(h.driver.check_deadline(10.0))
        rnd = h.driver.current
        assert rnd.phase == wire.Role.VERIFIER and VERIFIER.hex() in rnd.pending
        assert h.driver.workers.get(DRAFT.hex()) is None
        h.deliver(VERIFIER)
        assert h.driver.current is None and len(h.out["x"]) >= 1

    def test_overdue_guess_drops_its_worker(self, tiny_main, tiny_noisy_draft):
        """A look-ahead reply that never comes drops that draft worker at its deadline and
        forgets its guesses, so the next round can start."""
        h = Harness(tiny_main, tiny_noisy_draft, "on", 0)
        h.driver.step_timeout_s = 5.0
        h.route(h.driver.submit(b"gw", wire.Submit(request_id="x", prompt=PROMPTS["a"],
                                                   params=wire.SamplingParams(max_tokens=40))))
        h.route(h.driver.start(0.0))
        h.deliver(DRAFT)  # the tree; the VerifyStep and a guess step go out
        assert h.driver.ahead.busy()
        h.queues[DRAFT].clear()  # the guess reply is lost
        h.deliver(VERIFIER)
        h.route(h.driver.check_deadline(10.0))
        assert not h.driver.ahead.busy() and not h.driver.ahead.guesses
        assert h.driver.workers.get(DRAFT.hex()) is None
