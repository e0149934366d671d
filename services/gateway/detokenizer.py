"""Incremental detokenization for streamed output, constant work per step.

Each push decodes only a short window of the output (prefix/read offsets, as vLLM's
detokenizer keeps them): ``prefix`` is where the last emitted chunk started, ``read``
where it ended. The text ``decode(ids[prefix:]) - decode(ids[prefix:read])`` is new; it is
emitted once it does not end in U+FFFD (the start of a multi-byte UTF-8 character whose
remaining bytes are in tokens not generated yet), and the window moves on. Decoding a
window that starts one chunk back (not token by token) keeps spaces that tokenizers
attach to word starts, and the window always starts on a character boundary, so the
emitted text equals decoding the whole list (issue 14; was quadratic in the length).
"""

from __future__ import annotations

from typing import Protocol

REPLACEMENT = "\ufffd"


class Decoder(Protocol):
    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str: ...


class IncrementalDetokenizer:
    """Turns a growing token list into text deltas that never split a character."""

    def __init__(self, tokenizer: Decoder):
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._emitted = ""
        self._prefix = self._read = 0  # token offsets: the window start, the end of emitted text
        self._pending = 0  # characters already emitted past ``read`` (a stable part of an incomplete chunk)

    @property
    def text(self) -> str:
        """Everything emitted so far."""
        return self._emitted

    def push(self, tokens: list[int]) -> str:
        """Add new tokens; return the newly stable text (possibly empty)."""
        self._ids.extend(tokens)
        done = self._tokenizer.decode(self._ids[self._prefix:self._read])
        text = self._tokenizer.decode(self._ids[self._prefix:])
        if len(text) <= len(done) or text.endswith(REPLACEMENT):
            return self._advance_window(text[len(done):].rstrip(REPLACEMENT), done=False)
        return self._advance_window(text[len(done):], done=True)

    def trim_to(self, chars: int, new: int) -> int:
        """Keep only as many of the last ``new`` tokens as the first ``chars`` characters
        of the text need (a stop string ended the output there); returns how many."""
        base = len(self._ids) - new
        keep = next((k for k in range(1, new + 1)
                     if len(self._tokenizer.decode(self._ids[:base + k])) >= chars), new)
        del self._ids[base + keep:]
        self._prefix, self._read = min(self._prefix, len(self._ids)), min(self._read, len(self._ids))
        return keep

    def flush(self) -> str:
        """At the end of the output: emit what is left, incomplete characters included."""
        done = self._tokenizer.decode(self._ids[self._prefix:self._read])
        return self._advance_window(self._tokenizer.decode(self._ids[self._prefix:])[len(done):], done=True)

    def _advance_window(self, fresh: str, done: bool) -> str:
        """Emit the part of ``fresh`` (text after ``read``) not emitted yet; when the window's
        text is complete (``done``), the window moves to start at ``read``."""
        delta = fresh[self._pending:]
        self._emitted += delta
        self._pending += len(delta)
        if done:
            self._prefix, self._read, self._pending = self._read, len(self._ids), 0
        return delta
