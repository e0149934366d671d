"""Grammars for constrained decoding, built (and checked) in the gateway.

The gateway stays torch-free; llguidance (Rust, no torch) turns a JSON schema or a Lark
grammar into its grammar string, which travels in ``SamplingParams.grammar`` and is
compiled against the model's vocabulary in the draft and verifier workers. A schema
llguidance cannot follow is a 400 here, before anything is queued.
"""

from __future__ import annotations

import json

import llguidance

from services.gateway.openai_api import ApiError

TOOL_OPEN, TOOL_CLOSE = "<tool_call>\n", "\n</tool_call>"  # Qwen2.5's template format
# JSON layout: json.dumps' separators, no free whitespace (a model cannot loop on blanks,
# and the separators become forced tokens). A schema's own "x-guidance" wins.
LAYOUT = {"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", "}


def with_layout(schema: dict) -> dict:
    return schema if "x-guidance" in schema else {**schema, "x-guidance": LAYOUT}


def _checked(grammar: str, param: str) -> str:
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        raise ApiError(400, f"cannot constrain decoding to this schema: {error}", param=param)
    return grammar


def json_grammar(schema: dict) -> str:
    """Output = one JSON value matching ``schema`` (``{"type": "object"}``: any object)."""
    return _checked(llguidance.grammar_from("json_schema", json.dumps(with_layout(schema))), "response_format")


def call_schema(name: str, parameters: dict) -> dict:
    """The schema of ``{"name": name, "arguments": <parameters>}`` (keys in this order)."""
    return {"type": "object", "properties": {"name": {"const": name}, "arguments": parameters or {}},
            "required": ["name", "arguments"], "additionalProperties": False}


def tool_call_grammar(functions: list[tuple[str, dict]], parallel: bool = False) -> str:
    """Output = one ``<tool_call>`` block calling one of ``functions`` with valid arguments.

    ``parallel``: one or more blocks, separated by a newline.
    """
    schemas = [call_schema(name, params) for name, params in functions]
    body = with_layout(schemas[0] if len(schemas) == 1 else {"anyOf": schemas})
    start = "start: call (\"\\n\" call)*" if parallel else "start: call"
    lark = (f"{start}\ncall: {json.dumps(TOOL_OPEN)} body {json.dumps(TOOL_CLOSE)}\n"
            f"body: %json {json.dumps(body)}\n")
    return _checked(llguidance.grammar_from("lark", lark), "tools")
