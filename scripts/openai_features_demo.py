"""Issue 13 on a running gateway, with the official openai client.

    treespec up --port 18400 ...   # then:
    python scripts/openai_features_demo.py --base-url http://127.0.0.1:18400/v1

1. tool calls (tool_choice auto, streamed and not; required) + the follow-up role "tool" turn;
2. json_schema output for 10 prompts sent at once: every answer validated against the
   schema, with mean accepted length (from the /metrics counters) and tokens/s; then the
   same 10 prompts unconstrained (``--part plain``) for comparison.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                     "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}}]
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40}, "arguments": {"type": "array", "items": {"type": "string"},
                                                              "maxItems": 4},
    "pure": {"type": "boolean"}}, "required": ["name", "arguments", "pure"], "additionalProperties": False}
ASK = [{"role": "user", "content": "What is the weather in Paris right now? Use the tool."}]
TASKS = ["reverses a string", "computes the n-th Fibonacci number", "checks whether a number is prime",
         "merges two sorted lists", "counts words in a text", "parses an ISO date", "flattens a nested list",
         "computes a SHA-256 digest of a file", "deduplicates a list keeping order", "clamps a value to a range"]


def counters(base: str) -> tuple[float, float]:
    text = urllib.request.urlopen(base.removesuffix("/v1") + "/metrics", timeout=5).read().decode()
    get = lambda name: float(re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.M).group(1))
    return get("treespec:spec_decode_num_drafts_total"), get("treespec:spec_decode_num_accepted_tokens_total")


def auto_call(client, model) -> None:
    r = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, max_tokens=80, temperature=0)
    msg = r.choices[0].message
    print("auto, non-streamed:", r.choices[0].finish_reason,
          [(c.function.name, c.function.arguments) for c in msg.tool_calls or []], repr(msg.content), flush=True)


def auto_streamed(client, model) -> None:
    deltas, finish = [], None
    for chunk in client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, max_tokens=80,
                                                temperature=0, stream=True):
        ch = chunk.choices[0]
        deltas += [(tc.index, tc.function.name, tc.function.arguments) for tc in ch.delta.tool_calls or []]
        finish = ch.finish_reason or finish
    print(f"auto, streamed: finish={finish}, {len(deltas)} tool-call deltas:", deltas, flush=True)


def required(client, model) -> None:
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi there!"}],
                                       tools=TOOLS, tool_choice="required", max_tokens=60, temperature=0)
    c = r.choices[0].message.tool_calls[0]
    print("required (grammar-constrained):", r.choices[0].finish_reason, c.function.name, c.function.arguments,
          flush=True)


def follow_up(client, model) -> None:
    """The turn after the call the model made to ASK (its exact answer, as the client got it)."""
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'}}
    messages = ASK + [{"role": "assistant", "content": None, "tool_calls": [call]},
                      {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"temp_c": 18, "sky": "clear"})}]
    r = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, max_tokens=60, temperature=0)
    print("follow-up after role tool:", r.choices[0].finish_reason, repr(r.choices[0].message.content), flush=True)


def side_by_side(client, model, log_path: str, max_tokens: int) -> None:
    """The 10 prompts constrained and unconstrained, all sent at once (interleaved), so both
    groups share the machine's load; MAL per request from the scheduler's "finished" lines."""
    jobs = [(t, c) for t in TASKS for c in (True, False)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        rs = list(pool.map(lambda j: one(client, model, j[0], j[1], max_tokens), jobs))
    time.sleep(1.0)
    steps = {}
    for line in open(log_path):
        ev = json.loads(line)
        if ev.get("event") == "finished" and "verify_steps" in ev:
            steps[ev["request_id"]] = (ev["output_tokens"], ev["verify_steps"])
    for constrained in (True, False):
        group = [r for r, (_, c) in zip(rs, jobs) if c == constrained]
        toks = sum(steps[r["id"]][0] for r in group)
        verifies = sum(steps[r["id"]][1] for r in group)
        rate = sum(r["tokens"] / r["s"] for r in group) / len(group)
        label = "json_schema  " if constrained else "unconstrained"
        valid = f", schema-valid {sum(bool(r['valid']) for r in group)}/{len(group)}" if constrained else ""
        print(f"{label}: {toks} tokens / {verifies} verification steps = MAL {toks / verifies:.2f}; "
              f"mean per-request {rate:.3f} tok/s{valid}", flush=True)
        for r in group:
            print("    ", r["finish"], r["tokens"], f"{r['s']:.0f}s", r["text"][:140].replace("\n", " "))


def one(client, model, prompt: str, constrained: bool, max_tokens: int) -> dict:
    kw = {"response_format": {"type": "json_schema", "json_schema": {"name": "fn", "strict": True,
                                                                      "schema": SCHEMA}}} if constrained else {}
    t0 = time.perf_counter()
    r = client.chat.completions.create(model=model, max_tokens=max_tokens, temperature=0, messages=[
        {"role": "system", "content": "Answer only with a JSON object with keys name, arguments, pure."},
        {"role": "user", "content": f"Describe a Python function that {prompt}."}], **kw)
    text, valid = r.choices[0].message.content, None
    if constrained:
        jsonschema.validate(json.loads(text), SCHEMA)  # raises when invalid
        valid = True
    return {"tokens": r.usage.completion_tokens, "valid": valid, "text": text, "finish": r.choices[0].finish_reason,
            "id": r.id, "s": time.perf_counter() - t0}


def batch(client, model, base, constrained: bool, max_tokens: int) -> None:
    """All TASKS at once (the batch fills max_running); MAL from the /metrics counters."""
    d0, a0 = counters(base)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(TASKS)) as pool:
        rs = list(pool.map(lambda t: one(client, model, t, constrained, max_tokens), TASKS))
    secs = time.perf_counter() - t0
    time.sleep(2.0)  # scheduler stats reach the gateway with its heartbeat
    d1, a1 = counters(base)
    toks, drafts, acc = sum(r["tokens"] for r in rs), d1 - d0, a1 - a0
    for r in rs:
        print("  ", r["finish"], r["text"][:150].replace("\n", " "))
    label = "json_schema  " if constrained else "unconstrained"
    valid = f", schema-valid {sum(bool(r['valid']) for r in rs)}/{len(rs)}" if constrained else ""
    print(f"{label}: {toks} tokens in {secs:.1f} s = {toks / secs:.3f} tok/s, MAL {(drafts + acc) / drafts:.2f} "
          f"({int(drafts)} tree verifications){valid}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", default="http://127.0.0.1:18400/v1")
    ap.add_argument("--model", default="treespec")
    ap.add_argument("--part", default="tools,schema", help="comma list of: auto, tools, schema, plain, sidebyside")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--scheduler-log", default="logs/scheduler-0.log")
    args = ap.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key="none", max_retries=0, timeout=3000)
    parts = args.part.split(",")
    if "auto" in parts:
        auto_call(client, args.model)
    if "tools" in parts:  # concurrently: the machine is slow
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda f: f(client, args.model), [auto_streamed, required, follow_up]))
    if "schema" in parts:
        batch(client, args.model, args.base_url, True, args.max_tokens)
    if "sidebyside" in parts:
        side_by_side(client, args.model, args.scheduler_log, args.max_tokens)
    if "plain" in parts:
        batch(client, args.model, args.base_url, False, args.max_tokens)


if __name__ == "__main__":
    main()
