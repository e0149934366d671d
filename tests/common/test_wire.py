"""Wire schema: round trips and rejection of invalid frames."""

import msgpack
import numpy as np
import pytest

from common import wire
from common.tree import TokenTree


def _tree():
    return wire.tree_to_wire(TokenTree.build([5, 6, 7], [-1, 0, 0], [-0.1, -0.2, -0.3]))


MESSAGES = [
    wire.Submit(request_id="r1", prompt=[1, 2, 3], params=wire.SamplingParams(max_tokens=4, temperature=0.7,
                                                                              stop_token_ids=[9])),
    wire.Abort(request_id="r1"),
    wire.TokenDelta(request_id="r1", tokens=[4, 5], logprobs=[wire.TokenLogprob(logprob=-0.5, top=[(4, -0.5)])],
                    finish=wire.FinishReason.STOP),
    wire.Rejected(request_id="r1", status=429, reason="queue full"),
    wire.DraftStep(round=3, seqs=[wire.DraftSeq(seq_id="r1", prefix_len=0, new_tokens=[1, 2], tree_size=16,
                                                max_depth=4)]),
    wire.DraftResult(round=3, trees={"r1": _tree()}, lost=["r2"], draft_ms=1.5),
    wire.VerifyStep(round=3, seqs=[wire.VerifySeq(seq_id="r1", prefix_len=2, new_tokens=[3], tree=_tree(),
                                                  params=wire.SamplingParams(), history=[], seed=42)]),
    wire.VerifyResult(round=3, outs={"r1": wire.VerifyOut(accepted=[0, 1], bonus=8)}),
    wire.Free(seq_ids=["r1"]),
    wire.Hello(role=wire.Role.DRAFT, replica="d0", pid=123, slots_total=4, max_len=512),
    wire.Heartbeat(role=wire.Role.VERIFIER, replica="v0", slots_used=1),
    wire.Stats(running=1, waiting=0, num_drafts=2, num_draft_tokens=10, num_accepted_tokens=5, accepted_per_pos=[3, 2],
               tree_size=16, workers=[], ready=True),
]


class TestRoundTrip:
    @pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
    def test_encode_decode(self, msg):
        """Every message type decodes to an equal message."""
        assert wire.decode(wire.encode(msg)) == msg

    @pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
    def test_built_by_keyword_only(self, msg):
        """No message can be built with positional arguments (a new field cannot shift meaning)."""
        values = [getattr(msg, f) for f in type(msg).__struct_fields__]
        with pytest.raises(TypeError):
            type(msg)(*values)

    def test_tree_arrays(self):
        """A TokenTree survives tree_to_wire / tree_from_wire with dtypes intact."""
        t = wire.tree_from_wire(wire.decode(wire.encode(MESSAGES[5])).trees["r1"])
        np.testing.assert_array_equal(t.tokens, [5, 6, 7])
        np.testing.assert_array_equal(t.parents, [-1, 0, 0])
        assert t.tokens.dtype == np.int64 and t.parents.dtype == np.int32

    def test_plain_msgpack_reads_frame(self):
        """Any msgpack library reads a frame: a map tagged with "type" and version 'v'."""
        frame = msgpack.unpackb(wire.encode(MESSAGES[0]))
        assert frame["type"] == "submit" and frame["v"] == wire.PROTOCOL_VERSION
        assert frame["prompt"] == [1, 2, 3] and frame["params"]["max_tokens"] == 4


class TestInvalidFrames:
    def test_malformed(self):
        """Bytes that are not msgpack raise WireError."""
        with pytest.raises(wire.WireError):
            wire.decode(b"\xc1\xff not msgpack")

    def test_unknown_tag_and_wrong_types(self):
        """A well-formed map with an unknown tag or wrongly typed field raises WireError."""
        with pytest.raises(wire.WireError):
            wire.decode(msgpack.packb({"type": "nope", "v": 1}))
        with pytest.raises(wire.WireError):
            wire.decode(msgpack.packb({"type": "abort", "request_id": 5, "v": 1}))

    def test_oversized(self):
        """A frame larger than MAX_FRAME_BYTES is refused before parsing."""
        with pytest.raises(wire.WireError, match="exceeds"):
            wire.decode(b"\x00" * (wire.MAX_FRAME_BYTES + 1))

    def test_wrong_version(self):
        """A frame of another protocol version raises WireError."""
        with pytest.raises(wire.WireError, match="version"):
            wire.decode(wire.encode(wire.Abort(request_id="r1", v=wire.PROTOCOL_VERSION + 1)))

    def test_truncated(self):
        """Every proper prefix of a valid frame raises WireError."""
        frame = wire.encode(MESSAGES[6])
        for cut in range(len(frame)):
            with pytest.raises(wire.WireError):
                wire.decode(frame[:cut])

    def test_bad_arrays(self):
        """Arrays with a wrong byte count, forbidden dtype or negative shape raise WireError."""
        good = wire.Array.of(np.arange(3, dtype=np.int64))
        for bad in (wire.Array(dtype="int64", shape=[4], data=good.data), wire.Array(dtype="object", shape=[3],
                                                                                     data=good.data),
                    wire.Array(dtype="int64", shape=[-3], data=good.data)):
            with pytest.raises(wire.WireError):
                bad.numpy()

    def test_inconsistent_tree(self):
        """A tree whose parents break topological order raises WireError, not ValueError alone."""
        t = wire.Tree(tokens=wire.Array.of(np.array([1, 2], np.int64)), parents=wire.Array.of(np.array([1, -1],
                                                                                                       np.int32)),
                      scores=wire.Array.of(np.zeros(2, np.float32)))
        with pytest.raises(wire.WireError, match="invalid tree"):
            wire.tree_from_wire(t)
