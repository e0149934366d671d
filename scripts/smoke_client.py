"""Stdlib-only HTTP client for scripts/compose_smoke.sh (runs with any python3 on the host).

    python3 scripts/smoke_client.py chat URL KEY PROMPT MAX_TOKENS [--notify FILE --after N]
    python3 scripts/smoke_client.py completion URL KEY PROMPT MAX_TOKENS
    python3 scripts/smoke_client.py get URL [--grep TEXT]

``chat`` streams a greedy (temperature 0) chat completion over SSE and prints one JSON line:
``{"text", "chunks", "ttft_s", "total_s", "finish_reason"}``; with ``--notify`` it touches
FILE once N content chunks arrived (the smoke script kills a draft container then).
Exit status 1 on an HTTP error, a stream without ``[DONE]`` or an ``error`` event.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

TIMEOUT_S = 600


def _post(url: str, key: str, body: dict):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    return urllib.request.urlopen(req, timeout=TIMEOUT_S)


def chat(args) -> int:
    body = {"model": "treespec", "messages": [{"role": "user", "content": args.prompt}],
            "max_tokens": args.max_tokens, "temperature": 0, "stream": True}
    t0 = time.monotonic()
    ttft, parts, finish, done = None, [], None, False
    with _post(args.url + "/v1/chat/completions", args.key, body) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            event = json.loads(data)
            if "error" in event:
                print(json.dumps({"error": event["error"]}))
                return 1
            choice = event["choices"][0]
            piece = choice.get("delta", {}).get("content") or ""
            if piece:
                ttft = ttft if ttft is not None else time.monotonic() - t0
                parts.append(piece)
                if args.notify and len(parts) == args.after:
                    Path(args.notify).touch()
            finish = choice.get("finish_reason") or finish
    out = {"text": "".join(parts), "chunks": len(parts), "ttft_s": round(ttft or 0, 3),
           "total_s": round(time.monotonic() - t0, 3), "finish_reason": finish, "done": done}
    print(json.dumps(out))
    return 0 if done else 1


def completion(args) -> int:
    body = {"model": "treespec", "prompt": args.prompt, "max_tokens": args.max_tokens, "temperature": 0}
    t0 = time.monotonic()
    with _post(args.url + "/v1/completions", args.key, body) as resp:
        doc = json.load(resp)
    print(json.dumps({"text": doc["choices"][0]["text"], "usage": doc.get("usage"),
                      "total_s": round(time.monotonic() - t0, 3)}))
    return 0


def get(args) -> int:
    try:
        with urllib.request.urlopen(args.url, timeout=30) as resp:
            status, text = resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode()
    lines = [ln for ln in text.splitlines() if args.grep in ln] if args.grep else [text]
    print("\n".join(lines))
    return 0 if status == 200 else 1


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("chat", "completion"):
        p = sub.add_parser(name)
        p.add_argument("url")
        p.add_argument("key")
        p.add_argument("prompt")
        p.add_argument("max_tokens", type=int)
        p.add_argument("--notify")
        p.add_argument("--after", type=int, default=3)
    p = sub.add_parser("get")
    p.add_argument("url")
    p.add_argument("--grep")
    args = parser.parse_args()
    try:
        return {"chat": chat, "completion": completion, "get": get}[args.cmd](args)
    except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
        print(json.dumps({"error": repr(exc)}))
        return 1


if __name__ == "__main__":
    sys.exit(main())
