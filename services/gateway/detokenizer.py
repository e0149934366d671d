"""Incremental detokenization for streamed output.

Each push decodes the whole output token list and emits only the new *stable* suffix:
text past what was already emitted, minus trailing U+FFFD (the start of a multi-byte
UTF-8 character whose remaining bytes are in tokens not yet generated). Decoding the full
list (not token by token) keeps spaces that tokenizers attach to word starts.
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

    @property
    def text(self) -> str:
        """Everything emitted so far."""
        return self._emitted

    def push(self, tokens: list[int]) -> str:
        """Add new tokens; return the newly stable text (possibly empty)."""
        self._ids.extend(tokens)
        return self._advance(self._tokenizer.decode(self._ids).rstrip(REPLACEMENT))

    def trim_to(self, chars: int, new: int) -> int:
        """Keep only as many of the last ``new`` tokens as the first ``chars`` characters
        of the text need (a stop string ended the output there); returns how many."""
        base = len(self._ids) - new
        keep = next((k for k in range(1, new + 1)
                     if len(self._tokenizer.decode(self._ids[:base + k])) >= chars), new)
        del self._ids[base + keep:]
        return keep

    def flush(self) -> str:
        """At the end of the output: emit what is left, incomplete characters included."""
        return self._advance(self._tokenizer.decode(self._ids))

    def _advance(self, text: str) -> str:
        # Emitted text cannot be recalled: if a later token rewrote it (rare cleanup
        # rules), only what extends past it is emitted.
        delta = text[len(self._emitted):]
        self._emitted += delta
        return delta
