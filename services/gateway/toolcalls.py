"""Tool calls in a model's output text, whole and as it streams.

Qwen2.5's chat template asks for ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``,
but Qwen2.5-Coder often answers with the bare JSON object, a JSON list of them, a
``<tools>`` block or a fenced code block (vllm-project/vllm #32931, #33083). Both parsers
look for what all of these share: a JSON object with a ``"name"`` of an offered function
and its ``"arguments"`` (or ``"parameters"``). Text outside the calls is content.

:class:`ToolCallStream` emits OpenAI's streamed shape: per call one delta with index, id,
type and name (arguments ""), then argument-text deltas as the arguments arrive; joined,
a call's deltas are exactly its arguments text.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

CALL_HEAD = re.compile(r'"name"\s*:\s*"([^"\\]{1,64})"\s*,\s*"(?:arguments|parameters)"\s*:\s*')
WRAPPERS = re.compile(r"</?tool_call>|</?tools>|```(?:json)?")
TOOL_START = ("<tool_call>", "<tools>", "```", "{", "[")  # outputs that may be a call: held back
_decoder = json.JSONDecoder()


@dataclass(frozen=True)
class Call:
    """One parsed call: function name and its arguments as JSON text."""

    name: str
    arguments: str
    id: str = field(default_factory=lambda: "call_" + uuid.uuid4().hex[:24])

    def openai(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def _arguments_text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _objects(text: str):
    """(start, end, value) of each top-level JSON value found scanning ``text``."""
    pos = 0
    while pos < len(text):
        start = min((i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0), default=-1)
        if start < 0:
            return
        try:
            value, end = _decoder.raw_decode(text, start)
        except ValueError:
            pos = start + 1
            continue
        yield start, end, value
        pos = end


def _as_calls(value, names: set[str]) -> list[Call]:
    items = value if isinstance(value, list) else [value]
    calls = []
    for item in items:
        if not isinstance(item, dict) or item.get("name") not in names:
            return []
        args = item.get("arguments", item.get("parameters", {}))
        calls.append(Call(item["name"], _arguments_text(args)))
    return calls


def parse_calls(text: str, names: set[str]) -> tuple[str | None, list[Call]]:
    """Split a whole output into (content, calls); content None when only calls were said."""
    calls, kept, pos = [], [], 0
    for start, end, value in _objects(text):
        found = _as_calls(value, names)
        if found:
            calls += found
            kept.append(text[pos:start])
            pos = end
    if not calls:
        return text, []
    content = WRAPPERS.sub("", "".join(kept) + text[pos:]).strip()
    return content or None, calls


class ToolCallStream:
    """Incremental parser: push text pieces, get (content text, tool-call deltas)."""

    def __init__(self, names: set[str]):
        self._names, self._buf, self._sent = names, "", 0  # _sent: content chars already emitted
        self._tool_mode = False
        self._calls: list[tuple[Call, int]] = []  # (call, argument chars emitted)

    @property
    def called(self) -> bool:
        return bool(self._calls)

    def push(self, text: str, final: bool = False) -> tuple[str, list[dict]]:
        self._buf += text
        if not self._tool_mode:
            self._tool_mode = self._starts_call()
        if not self._tool_mode:
            return self._content(final), []
        deltas = self._call_deltas()
        if final and not self._calls:  # it looked like a call but was not one
            rest, self._sent = self._buf[self._sent:], len(self._buf)
            return rest, []
        return "", deltas

    def _starts_call(self) -> bool:
        head = self._buf[self._sent:].lstrip()
        if self._sent == 0 and head.startswith(TOOL_START):
            return True
        return "<tool_call>" in self._buf[self._sent:]

    def _content(self, final: bool) -> str:
        """Content to emit now: all but a tail that may start a call (``<tool_call>`` prefix)."""
        buf, end = self._buf, len(self._buf)
        if not final:
            if self._sent == 0 and not buf.strip():
                return ""
            if self._sent == 0 and any(t.startswith(buf.lstrip()) for t in TOOL_START):
                return ""
            for k in range(min(len("<tool_call>"), end - self._sent), 0, -1):
                if "<tool_call>".startswith(buf[end - k:]):
                    end -= k
                    break
        out, self._sent = buf[self._sent:end], end
        return out

    def _call_deltas(self) -> list[dict]:
        deltas, heads = [], [h for h in CALL_HEAD.finditer(self._buf, self._sent) if h.group(1) in self._names]
        for index, head in enumerate(heads):
            if index >= len(self._calls):
                call = Call(head.group(1), "")
                self._calls.append((call, 0))
                deltas.append({"index": index, "id": call.id, "type": "function",
                               "function": {"name": call.name, "arguments": ""}})
            deltas += self._argument_delta(index, head.end())
        return deltas

    def _argument_delta(self, index: int, start: int) -> list[dict]:
        call, sent = self._calls[index]
        try:
            value, end = _decoder.raw_decode(self._buf, start)
            raw = _arguments_text(value) if isinstance(value, str) else self._buf[start:end]
        except ValueError:  # incomplete: all text so far belongs to the arguments
            if self._buf[start:start + 1] == '"':
                return []
            raw = self._buf[start:].rstrip()
        if len(raw) <= sent:
            return []
        self._calls[index] = (call, len(raw))
        return [{"index": index, "function": {"arguments": raw[sent:]}}]
