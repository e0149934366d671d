"""Issue 13: the turn after a ``role: "tool"`` message on the real pair, parsed whole and streamed.

The prompt is built by the gateway's own chat plan (tools + assistant tool_calls + tool
result through the model's template, as ``scripts/openai_features_demo.py`` sends it);
the main model decodes greedily in process (greedy speculation commits the same tokens);
the output is then read back by the gateway's tool-call parsers, whole and piece by piece.

    PYTHONPATH=$PWD .venv/bin/python scripts/tool_followup_check.py
"""

from __future__ import annotations

import json
import time

from common import wire
from common.config import load_config
from common.tokenizer import load_tokenizer
from services.gateway.chat import plan_chat
from services.gateway.openai_api import ChatRequest
from treespec.engine import build_local_engine

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}}]
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'}}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris right now? Use the tool."},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"temp_c": 18, "sky": "clear"})}]


def main() -> None:
    req = ChatRequest.model_validate({"model": "treespec", "messages": MESSAGES, "tools": TOOLS,
                                      "max_tokens": 60, "temperature": 0})
    cfg = load_config(None, {"tree_size": 0})
    tok = load_tokenizer(cfg.main_model_path)
    plan = plan_chat(req, tok)
    engine, _ = build_local_engine(cfg, slots=1)
    t0, out = time.perf_counter(), []
    for delta in engine.generate("follow-up", plan.tokenize(tok), wire.SamplingParams(max_tokens=60)):
        out += delta.tokens
    text = tok.decode(out, skip_special_tokens=True)
    print("model output:", repr(text), f"({len(out)} tokens, {time.perf_counter() - t0:.0f} s)")
    content, calls = plan.parse_output(text)
    print("non-streamed: content", repr(content), "tool_calls", calls)
    stream, streamed, deltas = plan.stream_parser(), "", []
    pieces = [tok.decode([t]) for t in out if t not in tok.end_token_ids()]
    for i, piece in enumerate(pieces):
        c, d = stream.push(piece, final=i == len(pieces) - 1)
        streamed, deltas = streamed + c, deltas + d
    print("streamed: content", repr(streamed), "tool-call deltas", deltas)


if __name__ == "__main__":
    main()
