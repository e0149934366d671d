"""OpenAI response bodies: completions and chat, whole and as stream chunks.

One :class:`Formatter` per route builds every JSON object a response needs, so that the
streaming and non-streaming paths share them. Logprobs: one entry per returned token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from common import wire


@dataclass
class Formatter:
    """Response builder for one request; ``chat`` selects the chat-completions shapes."""

    request_id: str
    model: str
    chat: bool
    tokenizer: object
    created: int = field(default_factory=lambda: int(time.time()))

    def _base(self, chunk: bool) -> dict:
        kind = ("chat.completion" if self.chat else "text_completion") + (".chunk" if chunk and self.chat else "")
        return {"id": self.request_id, "object": kind, "created": self.created, "model": self.model}

    def chunk(self, text: str, logprobs: dict | None, finish: str | None, first: bool = False,
              tool_calls: list[dict] | None = None) -> dict:
        """One streamed choice update (chat: ``delta``; completions: ``text``).

        ``tool_calls``: OpenAI's streamed tool-call deltas (index, id/name once, argument text).
        """
        if self.chat:
            delta = {"role": "assistant", "content": text} if first else ({"content": text} if text else {})
            if tool_calls:
                delta["tool_calls"] = tool_calls
            choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}
        return {**self._base(True), "choices": [choice]}

    def usage_chunk(self, usage: dict) -> dict:
        return {**self._base(True), "choices": [], "usage": usage}

    def body(self, text: str | None, logprobs: dict | None, finish: str, usage: dict,
             tool_calls: list[dict] | None = None) -> dict:
        """The whole non-streaming response (chat: ``tool_calls`` in the message when made)."""
        if self.chat:
            message = {"role": "assistant", "content": text}
            if tool_calls:
                message["tool_calls"] = tool_calls
            choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}
        return {**self._base(False), "choices": [choice], "usage": usage}

    def logprobs(self, tokens: list[int], entries: list[wire.TokenLogprob] | None) -> dict | None:
        """Logprobs of ``tokens`` in the route's format; None when not requested."""
        if entries is None:
            return None
        if self.chat:
            return {"content": [self._chat_entry(t, e) for t, e in zip(tokens, entries)]}
        return {"tokens": [self._text(t) for t in tokens], "token_logprobs": [e.logprob for e in entries],
                "top_logprobs": [{self._text(i): lp for i, lp in e.top} for e in entries]}

    def merge_logprobs(self, parts: list[dict]) -> dict | None:
        """Concatenate per-piece logprobs for a non-streaming body."""
        if not parts:
            return None
        if self.chat:
            return {"content": [c for p in parts for c in p["content"]]}
        return {k: [x for p in parts for x in p[k]] for k in ("tokens", "token_logprobs", "top_logprobs")}

    def _chat_entry(self, token: int, e: wire.TokenLogprob) -> dict:
        text = self._text(token)
        top = [{"token": self._text(i), "logprob": lp, "bytes": list(self._text(i).encode())} for i, lp in e.top]
        return {"token": text, "logprob": e.logprob, "bytes": list(text.encode()), "top_logprobs": top}

    def _text(self, token: int) -> str:
        return self.tokenizer.decode([token], skip_special_tokens=False)


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}
