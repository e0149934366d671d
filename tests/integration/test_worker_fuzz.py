"""Real draft and verifier worker processes (tiny models) against a fake scheduler ROUTER.

The test binds the ROUTER itself, lets ``treespec draft`` / ``treespec verifier`` connect,
throws malformed and hostile frames at the worker, then checks that a valid step is still
answered exactly as an in-process runner answers it.
"""

from __future__ import annotations

import time

import msgspec
import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common import transport, wire
from tests.integration.cluster import BASE, Cluster, free_port

pytestmark = pytest.mark.timeout(300)

HELLO_TIMEOUT_S = 120.0  # model load + warm-up on a busy CPU
REPLY_TIMEOUT_S = 30.0
SILENCE_S = 0.5  # how long a dropped frame is given to (wrongly) produce a reply
VALID_ROUND = 10_000
PROMPT = [1, 2, 3, 4, 5]
HUGE = 10**9


class FakeScheduler:
    """A ROUTER the worker process connects to; ``peer`` is the worker's identity."""

    def __init__(self, tmp, role: str) -> None:
        self.role = role
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.linger = 0
        self.sock.bind(self.address)
        self.cluster = Cluster(self.address, tmp, {"insecure_control_plane": "true"})  # a plaintext fake
        self.proc = self.cluster.start(role, "fuzz")
        self.peer, hello = self.recv(HELLO_TIMEOUT_S, wire.Hello)
        assert hello.role.value == role

    def send(self, *frames: bytes) -> None:
        self.sock.send_multipart([self.peer, *frames])

    def recv(self, timeout_s: float, kind=None, round_: int | None = None):
        """(identity, message) of the next non-heartbeat message (of ``kind`` / ``round_``);
        raises TimeoutError."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            if not self.sock.poll(left * 1e3):
                break
            ident, msg = transport.split_router(self.sock.recv_multipart())
            if isinstance(msg, wire.Heartbeat):
                continue
            if (kind is None or isinstance(msg, kind)) and (round_ is None or msg.round == round_):
                return ident, msg
        raise TimeoutError(f"no {kind.__name__ if kind else 'reply'} within {timeout_s} s")

    def replies(self, seconds: float) -> list:
        """Every non-heartbeat message received during ``seconds``."""
        out = []
        try:
            while True:
                out.append(self.recv(seconds)[1])
        except TimeoutError:
            return out

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        self.cluster.stop()
        self.sock.close()


@pytest.fixture(scope="module", params=["draft", "verifier"])
def worker(request, tmp_path_factory):
    """A fake scheduler with one connected worker process of each role."""
    fake = FakeScheduler(tmp_path_factory.mktemp(request.param), request.param)
    yield fake
    fake.close()


def empty_tree() -> wire.Tree:
    z = np.zeros(0)
    return wire.Tree(tokens=wire.Array.of(z.astype(np.int64)), parents=wire.Array.of(z.astype(np.int32)),
                     scores=wire.Array.of(z.astype(np.float32)))


def chain_tree(n: int, token: int = 7) -> wire.Tree:
    """A chain of ``n`` nodes (valid arrays of any length)."""
    return wire.Tree(tokens=wire.Array.of(np.full(n, token, np.int64)),
                     parents=wire.Array.of(np.arange(-1, n - 1, dtype=np.int32)),
                     scores=wire.Array.of(np.zeros(n, np.float32)))


def step(role: str, round_: int, seq_id: str, prefix_len: int = 0, tokens=PROMPT, size: int = 4,
         depth: int = 4, tree: wire.Tree | None = None, **params) -> wire.Message:
    """A DraftStep or VerifyStep with one sequence."""
    if role == "draft":
        entry = wire.DraftSeq(seq_id=seq_id, prefix_len=prefix_len, new_tokens=list(tokens), tree_size=size,
                              max_depth=depth)
        return wire.DraftStep(round=round_, seqs=[entry])
    seq = wire.VerifySeq(seq_id=seq_id, prefix_len=prefix_len, new_tokens=list(tokens), tree=tree or empty_tree(),
                         params=wire.SamplingParams(**params))
    return wire.VerifyStep(round=round_, seqs=[seq])


def raw(**fields) -> bytes:
    """A msgpack map that is not a valid message (fields of the wrong type)."""
    return msgspec.msgpack.encode({"v": wire.PROTOCOL_VERSION, **fields})


def garbage_frames(role: str) -> list[list[bytes]]:
    """Frames the worker must drop without replying."""
    valid = wire.encode(step(role, 1, "g"))
    tag = "draft_step" if role == "draft" else "verify_step"
    bad_array = {"dtype": "int64", "shape": [wire.MAX_ARRAY_ELEMENTS + 1], "data": b""}
    wrong_role = step("verifier" if role == "draft" else "draft", 2, "g")
    return [
        [b""], [b"\xff" * 32], [valid[: len(valid) // 2]], [valid[:-1]], [valid, valid],
        [raw(type=tag, round="one", seqs=[])],
        [raw(type=tag, round=1, seqs={"a": 1})],
        [raw(type=tag, round=1, seqs=[{"seq_id": 5, "prefix_len": "0", "new_tokens": ["x"]}])],
        [raw(type=tag, round=1, seqs=[{"seq_id": "a", "prefix_len": 0, "new_tokens": [1.5], "tree_size": 4,
                                       "max_depth": 4, "tree": bad_array, "params": {}}])],
        [raw(type="no_such_type")], [raw(type=tag, round=1, seqs=[], v=99)],
        [wire.encode(wrong_role)], [wire.encode(wire.Hello(role=wire.Role.DRAFT, replica="x", pid=1))],
        [wire.encode(wire.Free(seq_ids=["never-seen", ""]))],
    ]


def hostile_steps(role: str) -> list[wire.Message]:
    """Decodable steps the worker must answer (each sequence served or reported lost)."""
    r = iter(range(100, 200))
    bad = wire.Array(dtype="int64", shape=[wire.MAX_ARRAY_ELEMENTS + 1], data=b"")
    cases = [
        step(role, next(r), "unknown", prefix_len=7),
        step(role, next(r), "negative", prefix_len=-3),
        step(role, next(r), "vocab", tokens=[HUGE, 1]),
        step(role, next(r), "below-zero", tokens=[-1, 2]),
        step(role, next(r), "long", tokens=[1] * 5000),
        step(role, next(r), "empty", tokens=[]),
    ]
    if role == "draft":
        cases += [step(role, next(r), "big-tree", size=HUGE, depth=HUGE),
                  step(role, next(r), "neg-tree", size=-4, depth=-1),
                  step(role, next(r), "zero-tree", size=0, depth=0)]
    else:
        cases += [step(role, next(r), "oversized", tree=wire.Tree(tokens=bad, parents=bad, scores=bad)),
                  step(role, next(r), "big-tree", tree=chain_tree(100_000)),
                  step(role, next(r), "bad-parents", tree=msgspec.structs.replace(
                      chain_tree(3), parents=wire.Array.of(np.array([5, -7, 99], np.int32)))),
                  step(role, next(r), "bad-dtype", tree=msgspec.structs.replace(
                      chain_tree(1), tokens=wire.Array(dtype="object", shape=[1], data=b"x"))),
                  step(role, next(r), "params", top_k=-5, top_p=7.0, temperature=-1.0, logprobs=HUGE),
                  wire.VerifyStep(round=next(r), seqs=[wire.VerifySeq(seq_id="banned", prefix_len=0,
                                                                      new_tokens=PROMPT, tree=chain_tree(2),
                                                                      params=wire.SamplingParams(),
                                                           banned=[HUGE, -HUGE], ban_depth=3)])]
    cases.append(wire.DraftStep(round=next(r), seqs=[wire.DraftSeq(seq_id="dup", prefix_len=0, new_tokens=PROMPT,
                                                                   tree_size=4, max_depth=4)] * 2) if role == "draft" else
                 wire.VerifyStep(round=next(r), seqs=[wire.VerifySeq(seq_id="dup", prefix_len=0, new_tokens=PROMPT,
                                                                     tree=empty_tree(), params=wire.SamplingParams())] * 2))
    return cases


def expected(role: str, msg: wire.Message) -> wire.Message:
    """The reply of an in-process runner built from the same tiny model."""
    from common.config import load_config
    from common.modeling.build import draft_model, main_model
    from services.draft.runner import DraftRunner
    from services.verifier.runner import VerifierRunner
    cfg = load_config(overrides={k: v for k, v in BASE.items() if not k.startswith("heartbeat")}, environ={})
    if role == "draft":
        return DraftRunner(draft_model(cfg)[0], 2, 256).step(msg)
    return VerifierRunner(main_model(cfg)[0], 2, 256).step(msg)


def served_or_lost(msg: wire.Message, reply: wire.Message) -> bool:
    done = set(reply.trees if isinstance(reply, wire.DraftResult) else reply.outs) | set(reply.lost)
    done |= set(getattr(reply, "failed", {}))
    return {s.seq_id for s in msg.seqs} <= done


class TestWorkerFuzz:
    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.binary(max_size=128), min_size=1, max_size=3))
    def test_random_bytes_are_dropped(self, worker, frames):
        """Random frames are dropped without a reply and without stopping the worker."""
        worker.send(*frames)
        assert worker.alive()

    def test_malformed_frames_are_dropped_silently(self, worker):
        """Truncated, mistyped, multi-frame, wrong-version and wrong-role frames get no reply."""
        for frames in garbage_frames(worker.role):
            worker.send(*frames)
        assert [m for m in worker.replies(SILENCE_S * 4) if not isinstance(m, wire.Heartbeat)] == []
        assert worker.alive()

    def test_hostile_steps_are_answered(self, worker):
        """Unknown sequences, bad token ids, oversized arrays and trees: every sequence is answered, lost or failed."""
        for msg in hostile_steps(worker.role):
            worker.send(wire.encode(msg))
            _, reply = worker.recv(REPLY_TIMEOUT_S, (wire.DraftResult, wire.VerifyResult), msg.round)
            assert served_or_lost(msg, reply), (msg.seqs[0].seq_id, reply)
            worker.send(wire.encode(wire.Free(seq_ids=[s.seq_id for s in msg.seqs])))
        assert worker.alive()

    def test_unknown_sequence_is_reported_lost(self, worker):
        """A step continuing a sequence the worker never saw is answered with it lost."""
        msg = step(worker.role, 50, "never-prefilled", prefix_len=12)
        worker.send(wire.encode(msg))
        _, reply = worker.recv(REPLY_TIMEOUT_S, (wire.DraftResult, wire.VerifyResult), 50)
        assert reply.lost == ["never-prefilled"]

    def test_valid_step_after_fuzz_matches_in_process_runner(self, worker):
        """After the fuzzing a valid step is answered exactly as an in-process runner answers it."""
        tree = chain_tree(3, token=9)
        msg = step(worker.role, VALID_ROUND, "valid", tree=tree)
        worker.send(wire.encode(msg))
        _, reply = worker.recv(REPLY_TIMEOUT_S, (wire.DraftResult, wire.VerifyResult), VALID_ROUND)
        want = expected(worker.role, msg)
        assert reply.lost == [] and worker.alive()
        if worker.role == "draft":
            got, ref = reply.trees["valid"], want.trees["valid"]
            assert got.tokens == ref.tokens and got.parents == ref.parents
            assert np.allclose(got.scores.numpy(), ref.scores.numpy(), atol=1e-4)
        else:
            assert reply.outs == want.outs
