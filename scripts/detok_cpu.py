"""Gateway detokenizer CPU per token at long outputs: re-decoding the whole output each
step (the detokenizer before issue 14) vs the prefix/read-offset window (now).

Streams N tokens of real Qwen2.5 output-like text (HumanEval prompts, repeated to N
tokens) through each detokenizer, ``chunk`` tokens per push (1 = plain decoding, 3 ~
one speculative round), and reports CPU microseconds per token (time.process_time).
Usage: .venv/bin/python scripts/detok_cpu.py [N=2048]   (prints JSON)
"""

from __future__ import annotations

import gzip
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common.tokenizer import load_tokenizer  # noqa: E402
from services.gateway.detokenizer import REPLACEMENT, IncrementalDetokenizer  # noqa: E402

HUMANEVAL = ROOT / "benchmarks" / "data" / "humaneval" / "HumanEval.jsonl.gz"


class FullRedecode:
    """The previous algorithm, verbatim in effect: decode all ids on every push."""

    def __init__(self, tokenizer) -> None:
        self.tok, self.ids, self.emitted = tokenizer, [], ""

    def push(self, tokens: list[int]) -> str:
        self.ids.extend(tokens)
        text = self.tok.decode(self.ids).rstrip(REPLACEMENT)
        delta = text[len(self.emitted):]
        self.emitted += delta
        return delta

    def flush(self) -> str:
        delta = self.tok.decode(self.ids)[len(self.emitted):]
        self.emitted += delta
        return delta


def cpu_us_per_token(make, ids: list[int], chunk: int) -> tuple[float, str]:
    detok = make()
    t0 = time.process_time()
    text = "".join(detok.push(ids[i:i + chunk]) for i in range(0, len(ids), chunk)) + detok.flush()
    return (time.process_time() - t0) / len(ids) * 1e6, text


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    tok = load_tokenizer("qwen2.5-coder-0.5b")
    with gzip.open(HUMANEVAL, "rt") as f:
        text = "".join(json.loads(line)["prompt"] for line in f)
    ids = tok.encode(text)[:n]
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("Model name")), "?")
    out = {"tokens": len(ids), "cpu": model, "machine": platform.machine(), "rows": []}
    for chunk in (1, 3):
        old_us, old_text = cpu_us_per_token(lambda: FullRedecode(tok), ids, chunk)
        new_us, new_text = cpu_us_per_token(lambda: IncrementalDetokenizer(tok), ids, chunk)
        out["rows"].append({"tokens_per_push": chunk, "full_redecode_us_per_token": round(old_us, 1),
                            "window_us_per_token": round(new_us, 1), "ratio": round(old_us / new_us, 1),
                            "same_text": old_text == new_text == tok.decode(ids)})
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
