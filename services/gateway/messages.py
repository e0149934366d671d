"""Chat messages, tools and response formats of an OpenAI chat request.

Schemas for the ``messages`` list (system / developer / user / assistant with
``tool_calls`` / tool), ``tools`` and ``tool_choice``, and ``response_format``; plus
:func:`template_messages`, which turns them into the dicts a Hugging Face chat template
expects (``developer`` becomes ``system``, OpenAI's name for the same role on models
without a separate one; tool-call arguments become objects, as Qwen's template wants).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

FUNCTION_NAME = r"^[A-Za-z0-9_.\-]{1,64}$"
TEMPLATE_ROLES = {"developer": "system"}  # OpenAI role -> the template's role


class Strict(BaseModel):
    """Strict types, unknown keys refused, and ``null`` meaning "absent" (as OpenAI treats it)."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


def _text_parts(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Accept only ``{"type": "text", "text": str}`` parts; name any other part type."""
    for part in parts:
        kind = part.get("type")
        if kind != "text":
            raise ValueError(f"content part type {kind!r} is not supported (this model reads text only)")
        if not isinstance(part.get("text"), str) or set(part) - {"type", "text"}:
            raise ValueError("a text content part is {\"type\": \"text\", \"text\": <string>}")
    return parts


class FunctionCall(Strict):
    name: Annotated[str, Field(pattern=FUNCTION_NAME)]
    arguments: str = "{}"  # a JSON object, as text (OpenAI's format)


class ToolCall(Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, list[dict[str, Any]], None] = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    _parts = field_validator("content")(lambda cls, v: _text_parts(v) if isinstance(v, list) else v)

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p["text"] for p in self.content)
        return self.content or ""

    def for_template(self) -> dict:
        """This message as a chat-template dict."""
        out: dict[str, Any] = {"role": TEMPLATE_ROLES.get(self.role, self.role), "content": self.text()}
        if self.tool_calls:
            out["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.function.name, "arguments": _arguments(c.function.arguments)}}
                for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out


def _arguments(text: str) -> Any:
    """Tool-call arguments as an object for the template (kept as text when not JSON)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


class FunctionDef(Strict):
    name: Annotated[str, Field(pattern=FUNCTION_NAME)]
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool = False


class Tool(Strict):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(Strict):
    name: str


class NamedToolChoice(Strict):
    type: Literal["function"]
    function: NamedFunction


ToolChoice = Union[Literal["none", "auto", "required"], NamedToolChoice]


class JsonSchemaFormat(Strict):
    name: Annotated[str, Field(pattern=FUNCTION_NAME)] = "response"
    description: str | None = None
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool = False


class ResponseFormat(Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> "ResponseFormat":
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("response_format type json_schema needs a json_schema object")
        return self


def template_messages(messages: list[ChatMessage]) -> list[dict]:
    return [m.for_template() for m in messages]
