"""Grammar-constrained decoding for token trees (llguidance matchers, torch masks).

A request with ``SamplingParams.grammar`` (an llguidance grammar: JSON schema or Lark,
built by the gateway) must only produce text the grammar accepts. Inside tree
speculation that means (i) the verifier masks each tree row's logits by the grammar
state *after the path to that row* (row 0: after the committed output; row 1 + i: after
the path to node i), before acceptance, so greedy acceptance equals constrained plain
decoding and sampling draws from the masked, renormalised main-model distribution; and
(ii) the draft proposes only tokens its node's grammar state allows, and a token the
grammar forces (the only one allowed) is added with probability 1 without looking at the
draft's logits, so constraints raise acceptance instead of wasting tree nodes.

Why masking the main model is enough for exact sampling here: the draft's children are
chosen deterministically (top-k), so the acceptance rule in
``services.verifier.acceptance.sample_accept`` never divides by a draft probability; it
draws each committed token from the verifier's row distribution p. With p masked and
renormalised, every token is drawn from the constrained distribution whatever the draft
proposed (the pitfall of arXiv 2605.07698, an unmasked q in the ratio p/q, cannot arise).

Matchers are kept per sequence and advanced by the output tokens the scheduler sends
(``history`` / ``output``); a sequence whose output does not extend the cached one (a
rollback or a re-placed request) gets a fresh matcher fed from the start.
"""

from __future__ import annotations

from dataclasses import dataclass

import llguidance
import llguidance.hf
import numpy as np
import torch

from common.tree import path_to

BITS = 32


@dataclass
class _Entry:
    grammar: str
    matcher: llguidance.LLMatcher
    consumed: list[int]


class _LazyTokenizer:
    """Builds the llguidance tokenizer (seconds, ~100 MB) on the first constrained request."""

    def __init__(self, build):
        self._build, self._tok = build, None

    def get(self) -> llguidance.LLTokenizer:
        if self._tok is None:
            self._tok = self._build()
        return self._tok


class GrammarMasks:
    """Per-sequence llguidance matchers over one model vocabulary of ``vocab_size`` ids."""

    def __init__(self, tokenizer, vocab_size: int, end_ids: list[int]):
        """``tokenizer``: an ``llguidance.LLTokenizer`` (or a lazy holder of one)."""
        self._tok = tokenizer if isinstance(tokenizer, _LazyTokenizer) else _LazyTokenizer(lambda: tokenizer)
        self.vocab_size, self.end_ids = vocab_size, sorted(end_ids)
        self._words = (vocab_size + BITS - 1) // BITS
        self._entries: dict[str, _Entry] = {}

    @classmethod
    def from_hf(cls, hf_tokenizer, vocab_size: int, end_ids) -> "GrammarMasks | None":
        """From a transformers fast tokenizer, converted on first use; None without one."""
        if hf_tokenizer is None:
            return None
        ends = sorted(end_ids) or None
        lazy = _LazyTokenizer(lambda: llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=vocab_size, eos_token=ends))
        return cls(lazy, vocab_size, sorted(end_ids))

    @property
    def tokenizer(self) -> llguidance.LLTokenizer:
        return self._tok.get()

    def sibling(self) -> "GrammarMasks":
        """Another table over the same (expensive) tokenizer, e.g. for the in-process draft."""
        return GrammarMasks(self._tok, self.vocab_size, self.end_ids)

    def free(self, seq_ids) -> None:
        for sid in seq_ids:
            self._entries.pop(sid, None)

    def matcher(self, seq_id: str, grammar: str, output: list[int]) -> llguidance.LLMatcher:
        """The sequence's matcher after consuming ``output`` (its generated tokens so far).

        Raises ValueError for a grammar llguidance cannot compile.
        """
        e = self._entries.get(seq_id)
        if e is None or e.grammar != grammar or output[:len(e.consumed)] != e.consumed:
            m = llguidance.LLMatcher(self.tokenizer, grammar)
            if m.is_error():
                raise ValueError(f"grammar error: {m.get_error()}")
            e = self._entries[seq_id] = _Entry(grammar, m, [])
        new = output[len(e.consumed):]
        if new:
            e.matcher.consume_tokens(new)  # an invalid token puts it in the error state (EOS only)
            e.consumed = list(output)
        return e.matcher

    def row_masks(self, m: llguidance.LLMatcher, tokens: np.ndarray, parents: np.ndarray,
                  rows: list[int] | None = None) -> torch.Tensor:
        """Allowed tokens per tree row: bool ``[len(rows), V]`` (default rows: root + every node).

        Row r = 0 is the state after the committed output; row r = 1 + i the state after
        the path root -> node i. A row whose path the grammar refuses (its node can never
        be accepted) allows only the end tokens.
        """
        return unpack(self.row_words(m, tokens, parents, rows), self.vocab_size)

    def row_words(self, m: llguidance.LLMatcher, tokens: np.ndarray, parents: np.ndarray,
                  rows: list[int] | None = None) -> np.ndarray:
        """:meth:`row_masks` packed: int32 ``[len(rows), ceil(V / 32)]``, bit j of word w = token 32 w + j."""
        rows = list(range(len(tokens) + 1)) if rows is None else rows
        words = np.zeros((len(rows), self._words), np.int32)
        for r, row in enumerate(rows):
            path = [] if row == 0 else [int(tokens[n]) for n in path_to(parents, row - 1)]
            self._fill(m, path, words[r])
        return words

    def fast_forward(self, m: llguidance.LLMatcher, path: list[int], limit: int) -> list[int]:
        """Up to ``limit`` tokens the grammar forces after ``path`` (llguidance's fast-forward
        tokens: the forced bytes, tokenized canonically); [] when the path is refused.

        Not every one is the only allowed token (``{"`` may also be spelled ``{`` + ``"``),
        so they are proposals that the verifier still checks, not commitments.
        """
        if limit <= 0:
            return []
        taken = m.try_consume_tokens(path) if path else 0
        forced = m.compute_ff_tokens() if taken == len(path) and not m.is_error() else []
        if taken:
            m.rollback(taken)
        out = []
        for t in map(int, forced[:limit]):
            if t in self.end_ids or not 0 <= t < self.vocab_size:
                break
            out.append(t)
        return out

    def _fill(self, m: llguidance.LLMatcher, path: list[int], out: np.ndarray) -> None:
        taken = m.try_consume_tokens(path) if path else 0
        if taken == len(path) and not m.is_error():
            m.unsafe_compute_mask_ptr(out.ctypes.data, out.nbytes)
        else:
            out[:] = 0
            for t in self.end_ids:
                out[t // BITS] |= np.int32(np.uint32(1 << (t % BITS)).view(np.int32))
        if taken:
            m.rollback(taken)


def forced_token(words: np.ndarray) -> int | None:
    """The only allowed token of a packed row ``[W]``, or None when several (or none) are."""
    if int(np.bitwise_count(words.view(np.uint32)).sum()) != 1:
        return None
    w = int(np.flatnonzero(words)[0])
    return w * BITS + int(np.uint32(words[w].view(np.uint32))).bit_length() - 1


def unpack(words: np.ndarray, vocab_size: int) -> torch.Tensor:
    """int32 bitmask ``[R, W]`` (bit j of word w = token 32 w + j) -> bool ``[R, vocab_size]``."""
    bits = np.unpackbits(np.ascontiguousarray(words).view(np.uint8), axis=-1, bitorder="little")  # [R, 32 W]
    return torch.from_numpy(bits[:, :vocab_size].astype(bool))


def apply_mask(scores: torch.Tensor, allowed: torch.Tensor, fallback: torch.Tensor | None = None) -> torch.Tensor:
    """Logits ``[R, V]`` with disallowed tokens at -inf. A row left with nothing allowed
    (e.g. min_tokens banned the end token the grammar requires) uses ``fallback`` masked."""
    out = scores.masked_fill(~allowed, float("-inf"))
    if fallback is not None and fallback is not scores:
        dead = torch.isinf(out).all(-1)
        if bool(dead.any()):
            out[dead] = fallback[dead].masked_fill(~allowed[dead], float("-inf"))
    return out
