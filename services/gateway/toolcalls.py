"""Tool calls in a model's output text, whole and as it streams.

Qwen2.5's chat template asks for ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``,
but Qwen2.5-Coder often answers with the bare JSON object, a JSON list of them, a
``<tools>`` block or a fenced code block (vllm-project/vllm #32931, #33083). Both parsers
look for what all of these share: a JSON object with a ``"name"`` of an offered function
and its ``"arguments"`` (or ``"parameters"``). Text outside the calls is content.

Only a whole, valid top-level JSON value is a call. A call-shaped object nested inside a
fragment that is not valid JSON stays content: after the tool result, the real Qwen pair
answered ``{{"name": "get_weather", "arguments": {...}}`` (one stray ``{``), which must
not become a call with content ``{``.

A call's ``arguments`` is the arguments text exactly as the model wrote it (a JSON-string
value is unquoted), so :class:`ToolCallStream`'s argument deltas, joined, equal the
non-streamed ``arguments``. The stream emits OpenAI's shape: per call one delta with
index, id, type and name (arguments ""), then argument-text deltas as the text arrives.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

CALL_HEAD = re.compile(r'"name"\s*:\s*"([^"\\]{1,64})"\s*,\s*"(?:arguments|parameters)"\s*:\s*')
WRAPPERS = re.compile(r"</?tool_call>|</?tools>|```(?:json)?")
WRAPPER_OPEN = re.compile(r"<tool_call>|<tools>|```")
# what may separate a call's opening brace from the text before it: wrappers, list
# punctuation, the previous call's closing brace, whitespace
CALL_GAP = re.compile(r"(?:\s|</?tool_call>|</?tools>|```(?:json)?|[\[\],}])*")
TOOL_START = ("<tool_call>", "<tools>", "```", "{", "[")  # outputs that may be a call: held back
CLOSERS = {"{": "}", "[": "]"}
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


def _fragment_end(text: str, start: int) -> int:
    """End of the invalid JSON fragment opened at ``text[start]`` ('{' or '['): just past its
    matching close bracket (strings skipped), else the next wrapper tag, else len(text)."""
    wrapper = WRAPPER_OPEN.search(text, start + 1)
    stack, pos, limit = [], start, wrapper.start() if wrapper else len(text)
    while pos < limit:
        ch = text[pos]
        if ch == '"':
            pos = _string_end(text, pos)
            continue
        if ch in CLOSERS:
            stack.append(CLOSERS[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
            if not stack:
                return pos + 1
        pos += 1
    return limit


def _string_end(text: str, quote: int) -> int:
    """Index just past the JSON string opening at ``text[quote]`` (len(text) when unclosed)."""
    pos = quote + 1
    while pos < len(text):
        if text[pos] == "\\":
            pos += 2
        elif text[pos] == '"':
            return pos + 1
        else:
            pos += 1
    return len(text)


def _objects(text: str):
    """(start, end, value) of each top-level JSON value found scanning ``text``; nothing
    inside a fragment that is not valid JSON is reported."""
    pos = 0
    while pos < len(text):
        start = min((i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0), default=-1)
        if start < 0:
            return
        try:
            value, end = _decoder.raw_decode(text, start)
        except ValueError:
            pos = _fragment_end(text, start)
            continue
        yield start, end, value
        pos = end


def _raw_arguments(text: str, start: int, end: int) -> list[tuple[str, str]]:
    """(name, arguments text as written) of each call head in ``text[start:end]``, in order,
    skipping heads inside an earlier call's arguments."""
    found, pos = [], start
    for head in CALL_HEAD.finditer(text, start, end):
        if head.start() < pos:
            continue
        try:
            value, pos = _decoder.raw_decode(text, head.end())
        except ValueError:
            return found
        found.append((head.group(1), value if isinstance(value, str) else text[head.end():pos]))
    return found


def _as_calls(text: str, start: int, end: int, value, names: set[str]) -> list[Call]:
    items = value if isinstance(value, list) else [value]
    if not items or any(not isinstance(item, dict) or item.get("name") not in names for item in items):
        return []
    raw = _raw_arguments(text, start, end)
    calls = []
    for index, item in enumerate(items):
        args = item.get("arguments", item.get("parameters", {}))
        written = raw[index][1] if index < len(raw) and raw[index][0] == item["name"] else None
        calls.append(Call(item["name"], written if written is not None else _arguments_text(args)))
    return calls


def parse_calls(text: str, names: set[str]) -> tuple[str | None, list[Call]]:
    """Split a whole output into (content, calls); content None when only calls were said."""
    calls, kept, pos = [], [], 0
    for start, end, value in _objects(text):
        found = _as_calls(text, start, end, value, names)
        if found:
            calls += found
            kept.append(text[pos:start])
            pos = end
    if not calls:
        return text, []
    content = WRAPPERS.sub("", "".join(kept) + text[pos:]).strip()
    return content or None, calls


class ToolCallStream:
    """Incremental parser: push text pieces, get (content text, tool-call deltas).

    A call starts streaming once its head (``{"name": "<offered>", "arguments":``) is seen
    at the top level: only wrappers, list punctuation and whitespace between the previous
    call (or the start of the call region) and its opening brace. Output that looked like
    a call but held none is released as content when the answer ends."""

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

    def _heads(self) -> list[tuple[str, int]]:
        """(name, arguments start) of each top-level call head in the buffer so far."""
        heads, boundary = [], self._sent
        for head in CALL_HEAD.finditer(self._buf, self._sent):
            if boundary is None or head.start() < boundary:
                continue  # inside the previous call's (unfinished) arguments
            brace = self._buf.rfind("{", boundary, head.start())
            if head.group(1) not in self._names or brace < 0 or self._buf[brace + 1:head.start()].strip() \
                    or CALL_GAP.fullmatch(self._buf, boundary, brace) is None:
                return heads  # not a top-level call: no later head is one either
            heads.append((head.group(1), head.end()))
            boundary = self._arguments_end(head.end())
        return heads

    def _arguments_end(self, start: int) -> int | None:
        try:
            return _decoder.raw_decode(self._buf, start)[1]
        except ValueError:
            return None

    def _call_deltas(self) -> list[dict]:
        deltas = []
        for index, (name, start) in enumerate(self._heads()):
            if index >= len(self._calls):
                call = Call(name, "")
                self._calls.append((call, 0))
                deltas.append({"index": index, "id": call.id, "type": "function",
                               "function": {"name": call.name, "arguments": ""}})
            deltas += self._argument_delta(index, start)
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
