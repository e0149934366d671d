"""Chaos on the real Qwen pair: ``treespec up`` with qwen2.5-coder-1.5b / 0.5b, then for each
of gateway, scheduler, draft and verifier, kill -9 and separately SIGSTOP for 10 s during 8
concurrent greedy streams (HumanEval prompts). Prints the table (Markdown) and writes JSON.

Usage: .venv/bin/python scripts/chaos_real.py [--port 18310] [--scheduler-port 18311]
       [--max-tokens 32] [--only draft:kill,verifier:stop] [--out chaos_real.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from treespec import chaos  # noqa: E402

READY_S = 900.0


def prompts(n: int) -> list[str]:
    with gzip.open(ROOT / "benchmarks" / "data" / "humaneval" / "HumanEval.jsonl.gz", "rt") as f:
        return [json.loads(line)["prompt"] for line in f][:n]


def start(port: int, sched_port: int, log_dir: Path, extra: list[str]) -> subprocess.Popen:
    argv = [sys.executable, "-m", "treespec.cli", "up", "--port", str(port), "--scheduler-address",
            f"tcp://127.0.0.1:{sched_port}", "--set", f"log_dir={log_dir}", "--set", "max_running=9",
            "--set", "max_model_len=1024", *extra]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TREESPEC_")}
    out = open(log_dir / "up.out", "ab")
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True)


def wait_health(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url + "/health", timeout=3) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise RuntimeError("deployment not ready")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=18310)
    ap.add_argument("--scheduler-port", type=int, default=18311)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--deadline", type=float, default=600.0, help="s before a stream counts as hung")
    ap.add_argument("--only", default="", help="comma list of service:fault (default: all 8)")
    ap.add_argument("--up-args", default="", help="extra `treespec up` arguments")
    ap.add_argument("--out", default="chaos_real.json")
    args = ap.parse_args()
    faults = [tuple(x.split(":")) for x in args.only.split(",") if x] or \
        [(s, f) for s in chaos.SERVICES for f in chaos.FAULTS]
    log_dir = Path(tempfile.mkdtemp(prefix="chaos-real-"))
    url = f"http://127.0.0.1:{args.port}"
    proc = start(args.port, args.scheduler_port, log_dir, args.up_args.split())
    results = []
    try:
        wait_health(url, proc)
        bodies = chaos.bodies_for(prompts(8), args.max_tokens)
        t0 = time.monotonic()
        reference = chaos.reference_texts(url, bodies, args.deadline)
        print(f"reference run: {time.monotonic() - t0:.1f} s", flush=True)
        for service, fault in faults:
            res = chaos.run_fault(proc.pid, url, service, fault, bodies, reference, args.deadline, READY_S)
            print(json.dumps(res.row()), flush=True)
            results.append(res)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
        Path(args.out).write_text(json.dumps({"log_dir": str(log_dir), "max_tokens": args.max_tokens,
                                              "results": [r.row() for r in results]}, indent=1))
    print(chaos.table(results))
    return 0 if all(r.hung == 0 and r.slots_leaked == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
