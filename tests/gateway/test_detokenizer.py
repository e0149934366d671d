"""Incremental detokenization: no split characters, no lost spaces."""

from __future__ import annotations

import pytest

from services.gateway.detokenizer import IncrementalDetokenizer
from tests.gateway.fakes import ByteTokenizer

TEXT = "héllo 你好, world 😀!"


class TestIncrementalDetokenizer:
    def test_byte_tokens_never_split_a_character(self):
        """Feeding one byte at a time emits only whole characters and rebuilds the text."""
        detok = IncrementalDetokenizer(ByteTokenizer())
        pieces = [detok.push([b]) for b in TEXT.encode()]
        assert "".join(pieces) + detok.flush() == TEXT
        assert all("\ufffd" not in p for p in pieces)
        assert "" in pieces  # the lead bytes of 你 / 😀 were held back

    def test_multi_token_chunks(self):
        """Chunks of several tokens that end mid-character are held until complete."""
        data = TEXT.encode()
        detok = IncrementalDetokenizer(ByteTokenizer())
        out = [detok.push(list(data[i:i + 3])) for i in range(0, len(data), 3)]
        assert "".join(out) + detok.flush() == TEXT

    def test_flush_emits_an_incomplete_tail(self):
        """A truncated character at the very end is emitted as U+FFFD by flush."""
        detok = IncrementalDetokenizer(ByteTokenizer())
        assert detok.push(list("ok".encode()) + ["😀".encode()[0]]) == "ok"
        assert detok.flush() == "\ufffd"


@pytest.fixture(scope="module")
def qwen():
    from common.tokenizer import load_tokenizer
    try:
        return load_tokenizer("qwen2.5-coder-0.5b")
    except (FileNotFoundError, OSError):
        pytest.skip("packaged Qwen tokenizer not fetched")


class TestWithQwenTokenizer:
    def test_token_by_token_matches_full_decode(self, qwen):
        """Streaming Qwen tokens one by one yields exactly the full decode (spaces, CJK, emoji)."""
        text = "def f(x):\n    return x  # 你好 世界 😀🎉 naïve"
        ids = qwen.encode(text)
        detok = IncrementalDetokenizer(qwen)
        pieces = [detok.push([t]) for t in ids]
        assert "".join(pieces) + detok.flush() == qwen.decode(ids) == text
        assert all("\ufffd" not in p for p in pieces)

    @pytest.mark.parametrize("seed", range(3))
    def test_random_tokens_in_random_chunks_match_full_decode(self, qwen, seed):
        """Random Qwen token ids (byte-level pieces that split UTF-8 characters) pushed in
        random chunk sizes give exactly the full decode, and every window stays short."""
        import random
        rng = random.Random(seed)
        ids = [rng.randrange(0, 151643) for _ in range(400)]
        detok = IncrementalDetokenizer(qwen)
        pieces, i, widest = [], 0, 0
        while i < len(ids):
            n = rng.choice([1, 1, 2, 3, 7])
            pieces.append(detok.push(ids[i:i + n]))
            widest = max(widest, len(detok._ids) - detok._prefix)
            i += n
        assert "".join(pieces) + detok.flush() == qwen.decode(ids)
        assert widest < 40  # constant work per step, not the whole output


class TestTrimTo:
    def test_keeps_tokens_up_to_a_character_count(self):
        """trim_to keeps the fewest new tokens whose text reaches the given length."""
        detok = IncrementalDetokenizer(ByteTokenizer())
        detok.push(list(b"ab"))
        detok.push(list(b"cdef"))
        assert detok.trim_to(4, 4) == 2  # "abcd": the first two of the four new bytes
        assert detok.trim_to(9, 2) == 2  # never more than the new tokens
