"""Per-sequence validation of a VerifyStep entry before it touches a tensor. Pure, torch-free.

Every token id a sequence carries (new tokens, penalty history, banned ids, stop ids) must
index the vocabulary: an out-of-range id would raise inside a batched gather (and on CUDA
trip a sticky device assert that poisons every later step). A sequence that fails here
fails alone; its batch neighbours are verified as usual.
"""

from __future__ import annotations

import math

from common import wire

MAX_LOGPROBS = 20  # top alternatives a sequence may ask for (OpenAI's limit)


def _out_of_vocab(ids, vocab_size: int) -> int | None:
    return next((t for t in ids if not 0 <= t < vocab_size), None)


def invalid_reason(s: wire.VerifySeq, vocab_size: int) -> str | None:
    """Why ``s`` cannot be verified (a short message naming the field), or None."""
    p = s.params
    for name, ids in (("new_tokens", s.new_tokens), ("history", s.history), ("banned", s.banned),
                      ("stop_token_ids", p.stop_token_ids)):
        bad = _out_of_vocab(ids, vocab_size)
        if bad is not None:
            return f"{name} holds token id {bad} outside the vocabulary 0..{vocab_size - 1}"
    checks = [
        ("temperature", math.isfinite(p.temperature) and p.temperature >= 0),
        ("top_p", 0 < p.top_p <= 1),
        ("top_k", 0 <= p.top_k),
        ("logprobs", p.logprobs is None or 0 <= p.logprobs <= min(MAX_LOGPROBS, vocab_size)),
        ("repetition_penalty", math.isfinite(p.repetition_penalty) and p.repetition_penalty > 0),
        ("presence_penalty", math.isfinite(p.presence_penalty)),
        ("frequency_penalty", math.isfinite(p.frequency_penalty)),
        ("ban_depth", s.ban_depth >= 0),
    ]
    bad_field = next((name for name, ok in checks if not ok), None)
    return None if bad_field is None else f"invalid sampling parameter {bad_field}"
