"""What a chat request asks beyond plain text: tools, tool_choice and response_format.

:func:`plan_chat` turns a validated :class:`ChatRequest` into a :class:`ChatPlan`: the
messages and tools for the chat template, the grammar decoding must follow (JSON for
``response_format``; a ``<tool_call>`` whose arguments match the function's parameter
schema for ``tool_choice`` ``required`` or a named function), and how the output is read
back (tool calls parsed for ``auto`` / ``required`` / named; never for ``none``).
Completions get the empty plan: no template, no grammar, text out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import msgspec

from common import wire
from services.gateway.grammars import json_grammar, tool_call_grammar
from services.gateway.messages import template_messages
from services.gateway.openai_api import ApiError
from services.gateway.toolcalls import Call, ToolCallStream, parse_calls


class _PlainText:
    """The stream parser of a request without tools: text passes through."""

    called = False

    @staticmethod
    def push(text: str, final: bool = False) -> tuple[str, list[dict]]:
        return text, []


@dataclass
class ChatPlan:
    """Template inputs, grammar and output reading for one request (defaults: plain text)."""

    messages: list[dict] = field(default_factory=list)
    tools: list[dict] | None = None  # OpenAI tool dicts for the template
    tool_names: set[str] = field(default_factory=set)  # parse calls to these from the output
    grammar: str | None = None

    @property
    def prompt_chars(self) -> int:
        return sum(len(m.get("content") or "") for m in self.messages) + len(json.dumps(self.tools or []))

    def tokenize(self, tok) -> list[int]:
        """Template + tokenize (CPU-bound: run off the event loop). Template errors -> 400."""
        try:
            text = tok.apply_chat_template(self.messages, tools=self.tools) if self.tools else \
                tok.apply_chat_template(self.messages)
        except ValueError as exc:
            raise ApiError(400, str(exc), param="messages") from None
        return tok.encode(text, add_special_tokens=False)

    def constrain(self, params: wire.SamplingParams) -> wire.SamplingParams:
        return msgspec.structs.replace(params, grammar=self.grammar) if self.grammar else params

    def parse_output(self, text: str) -> tuple[str | None, list[dict] | None]:
        """(content, tool_calls) of a whole answer; tool_calls None when none were made."""
        if not self.tool_names:
            return text, None
        content, calls = parse_calls(text, self.tool_names)
        return content, [c.openai() for c in calls] or None

    def stream_parser(self):
        return ToolCallStream(self.tool_names) if self.tool_names else _PlainText()


def plan_chat(req) -> ChatPlan:
    """The plan of a validated ChatRequest; ApiError(400) for a schema no grammar can follow."""
    messages = template_messages(req.messages)
    choice = req.tool_choice or ("auto" if req.tools else "none")
    if choice == "none" or not req.tools:
        return ChatPlan(messages, grammar=_format_grammar(req.response_format))
    offered = [t for t in req.tools if isinstance(choice, str) or t.function.name == choice.function.name]
    tools = [t.model_dump(by_alias=True, exclude_none=True) for t in req.tools]
    grammar = None if choice == "auto" else tool_call_grammar(
        [(t.function.name, t.function.parameters) for t in offered])
    return ChatPlan(messages, tools, {t.function.name for t in offered}, grammar)


def _format_grammar(fmt) -> str | None:
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return json_grammar({"type": "object"})
    return json_grammar(fmt.json_schema.schema_)


__all__ = ["Call", "ChatPlan", "plan_chat"]
