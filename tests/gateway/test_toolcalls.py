"""Tool calls parsed from what Qwen2.5-Coder actually writes, whole and streamed."""

from __future__ import annotations

import json

import pytest

from services.gateway.toolcalls import ToolCallStream, parse_calls

NAMES = {"get_weather", "add"}
ARGS = '{"city": "Paris", "unit": "c"}'
FORMS = [
    f'<tool_call>\n{{"name": "get_weather", "arguments": {ARGS}}}\n</tool_call>',
    f'{{"name": "get_weather", "arguments": {ARGS}}}',
    f'<tools>\n{{"name": "get_weather", "arguments": {ARGS}}}\n</tools>',
    f'```json\n{{"name": "get_weather", "arguments": {ARGS}}}\n```',
    f'[{{"name": "get_weather", "arguments": {ARGS}}}]',
]


class TestParseCalls:
    @pytest.mark.parametrize("text", FORMS)
    def test_every_emitted_form(self, text):
        """Tagged, bare, <tools>, fenced and list forms all give one call with its arguments."""
        content, calls = parse_calls(text, NAMES)
        assert content is None and [(c.name, json.loads(c.arguments)) for c in calls] == [
            ("get_weather", json.loads(ARGS))]

    def test_prose_and_unknown_names_stay_content(self):
        """JSON naming no offered function is content, not a call."""
        text = 'Use {"name": "rm_rf", "arguments": {}} carefully'
        assert parse_calls(text, NAMES) == (text, [])

    def test_two_calls_and_leading_prose(self):
        """Several tagged calls are parsed in order; prose before them is the content."""
        text = ('Let me check.\n<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>\n'
                '<tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call>')
        content, calls = parse_calls(text, NAMES)
        assert content == "Let me check." and [c.name for c in calls] == ["add", "get_weather"]


def run_stream(text: str, step: int):
    stream, content, deltas = ToolCallStream(NAMES), "", []
    pieces = [text[i:i + step] for i in range(0, len(text), step)]
    for i, piece in enumerate(pieces):
        out, d = stream.push(piece, final=i == len(pieces) - 1)
        content += out
        deltas += d
    return content, deltas, stream.called


class TestToolCallStream:
    @pytest.mark.parametrize("text", FORMS)
    @pytest.mark.parametrize("step", [1, 3, 1000])
    def test_argument_deltas_join_to_the_arguments(self, text, step):
        """Streamed: one header delta (id, name, "") then argument deltas joining to the arguments."""
        content, deltas, called = run_stream(text, step)
        assert called and content == ""
        assert deltas[0]["function"] == {"name": "get_weather", "arguments": ""} and deltas[0]["id"]
        args = "".join(d["function"]["arguments"] for d in deltas)
        assert json.loads(args) == json.loads(ARGS) and all(d["index"] == 0 for d in deltas)

    @pytest.mark.parametrize("step", [1, 4])
    def test_plain_text_streams_through(self, step):
        """Text that is not a call streams as content, unchanged."""
        text = "Paris is sunny <tool today, {not json"
        content, deltas, called = run_stream(text, step)
        assert content == text and deltas == [] and not called

    def test_json_that_is_not_a_call_is_released_at_the_end(self):
        """Held-back JSON that names no function comes out as content when the answer ends."""
        text = '{"answer": 42}'
        assert run_stream(text, 2)[:2] == (text, [])


# what the real pair (Qwen2.5-Coder-1.5B, greedy) answered after a role "tool" message
STRAY_BRACE = '{{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}'
PRETTY = '{\n    "city": "Paris",\n    "unit": "c"\n  }'  # as the real pair formats arguments
INVALID_FRAGMENTS = [
    STRAY_BRACE,
    '{ {"name": "get_weather", "arguments": {}} }',
    '[{"name": "get_weather", "arguments": {"city": "Paris"}}',
    '{"name": "get_weather", "arguments": {"city": "Paris"}',
]


class TestInvalidFragments:
    @pytest.mark.parametrize("text", INVALID_FRAGMENTS)
    def test_whole_output_stays_content(self, text):
        """A call-shaped object inside JSON that is not valid (stray or missing bracket) is content."""
        assert parse_calls(text, NAMES) == (text, [])

    @pytest.mark.parametrize("text", INVALID_FRAGMENTS[:2])
    @pytest.mark.parametrize("step", [1, 5, 1000])
    def test_streamed_output_stays_content(self, text, step):
        """Streamed, the same fragments report no call and come out whole as content."""
        assert run_stream(text, step) == (text, [], False)

    def test_broken_prose_before_a_valid_call(self):
        """A broken fragment closed before a later valid call does not hide that call."""
        text = 'Set {x: 1} then {"name": "add", "arguments": {"a": 1}}'
        content, calls = parse_calls(text, NAMES)
        assert content == "Set {x: 1} then" and [(c.name, c.arguments) for c in calls] == [("add", '{"a": 1}')]

    def test_unclosed_prose_brace_before_a_tagged_call(self):
        """An unclosed brace in prose ends at the next <tool_call> tag; the tagged call is parsed."""
        text = 'a set { of\n<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>'
        assert [c.name for c in parse_calls(text, NAMES)[1]] == ["add"]


WRITTEN = [
    f'<tool_call>\n{{"name": "get_weather", "arguments": {PRETTY}}}\n</tool_call>',
    f'{{"name": "get_weather", "arguments": {PRETTY}}}',
    f'```json\n[{{"name": "get_weather", "parameters": {PRETTY}}}]\n```',
    '{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}',
    '<tool_call>\n{"name":"add","arguments":{"a":1,"b":[2, 3]}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris"}}\n</tool_call>',
]


class TestStreamedEqualsWhole:
    @pytest.mark.parametrize("text", WRITTEN)
    @pytest.mark.parametrize("step", [1, 2, 7, 1000])
    def test_joined_deltas_equal_the_arguments_string(self, text, step):
        """Per call, the joined argument deltas are exactly the non-streamed ``arguments`` string."""
        _, calls = parse_calls(text, NAMES)
        _, deltas, called = run_stream(text, step)
        joined: dict[int, str] = {}
        for d in deltas:
            joined[d["index"]] = joined.get(d["index"], "") + d["function"]["arguments"]
        assert called and calls and [joined[i] for i in range(len(calls))] == [c.arguments for c in calls]

    def test_arguments_keep_the_models_formatting(self):
        """The arguments text is what the model wrote (not re-serialised), a JSON string unquoted."""
        assert parse_calls(WRITTEN[1], NAMES)[1][0].arguments == PRETTY
        assert parse_calls(WRITTEN[3], NAMES)[1][0].arguments == '{"city": "Paris"}'
