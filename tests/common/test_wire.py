"""Wire schema: round trips and rejection of invalid frames."""

import msgpack
import numpy as np
import pytest

from common import wire
from common.tree import TokenTree


def _tree():
    return wire.tree_to_wire(TokenTree.build([5, 6, 7], [-1, 0, 0], [-0.1, -0.2, -0.3]))


MESSAGES = [
    wire.Submit("r1", [1, 2, 3], wire.SamplingParams(max_tokens=4, temperature=0.7, stop_token_ids=[9])),
    wire.Abort("r1"),
    wire.TokenDelta("r1", [4, 5], [wire.TokenLogprob(-0.5, [(4, -0.5)])], wire.FinishReason.STOP),
    wire.Rejected("r1", 429, "queue full"),
    wire.DraftStep(3, [wire.DraftSeq("r1", 0, [1, 2], 16, 4)]),
    wire.DraftResult(3, {"r1": _tree()}, ["r2"], 1.5),
    wire.VerifyStep(3, [wire.VerifySeq("r1", 2, [3], _tree(), wire.SamplingParams(), [], 42)]),
    wire.VerifyResult(3, {"r1": wire.VerifyOut([0, 1], 8)}),
    wire.Free(["r1"]),
    wire.Hello(wire.Role.DRAFT, "d0", 123, 4, 512),
    wire.Heartbeat(wire.Role.VERIFIER, "v0", slots_used=1),
    wire.Stats(1, 0, 2, 10, 5, [3, 2], 16, [], True),
]


class TestRoundTrip:
    @pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
    def test_encode_decode(self, msg):
        """Every message type decodes to an equal message."""
        assert wire.decode(wire.encode(msg)) == msg

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
            wire.decode(wire.encode(wire.Abort("r1", v=wire.PROTOCOL_VERSION + 1)))

    def test_truncated(self):
        """Every proper prefix of a valid frame raises WireError."""
        frame = wire.encode(MESSAGES[6])
        for cut in range(len(frame)):
            with pytest.raises(wire.WireError):
                wire.decode(frame[:cut])

    def test_bad_arrays(self):
        """Arrays with a wrong byte count, forbidden dtype or negative shape raise WireError."""
        good = wire.Array.of(np.arange(3, dtype=np.int64))
        for bad in (wire.Array("int64", [4], good.data), wire.Array("object", [3], good.data),
                    wire.Array("int64", [-3], good.data)):
            with pytest.raises(wire.WireError):
                bad.numpy()

    def test_inconsistent_tree(self):
        """A tree whose parents break topological order raises WireError, not ValueError alone."""
        t = wire.Tree(wire.Array.of(np.array([1, 2], np.int64)), wire.Array.of(np.array([1, -1], np.int32)),
                      wire.Array.of(np.zeros(2, np.float32)))
        with pytest.raises(wire.WireError, match="invalid tree"):
            wire.tree_from_wire(t)
