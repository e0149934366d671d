"""Fault injection against a running ``treespec up``: kill -9 or SIGSTOP one service while
concurrent greedy streams run, and classify how every stream ended. Torch-free.

Used by ``tests/chaos/`` (tiny models) and ``scripts/chaos_real.py`` (the Qwen pair).
For one fault it records: streams completed with the reference (fault-free) greedy text,
completed with other text, failed cleanly (an SSE error event or an HTTP error, with the
seconds from the fault), hung (no end within the deadline: must be 0), KV slots still
held afterwards (must be 0) and the seconds until a fresh request is served again.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field

import psutil

SERVICES = ("gateway", "scheduler", "draft", "verifier")
FAULTS = ("kill", "stop")
STOP_S = 10.0  # SIGSTOP duration
PROBE_S = 0.5  # how often the serve-again probe retries


@dataclass
class StreamEnd:
    """How one stream ended: ``kind`` in done / error / http / dropped / hung."""

    kind: str
    text: str = ""
    finish: str | None = None
    ended_s: float = 0.0  # time.monotonic() at the end
    detail: str = ""


@dataclass
class FaultResult:
    service: str
    fault: str
    identical: int = 0
    different: int = 0
    failed_clean: int = 0
    failed_max_s: float = 0.0  # longest fault -> clean failure delay (s)
    dropped: int = 0  # connection closed without an error event (the gateway itself died)
    hung: int = 0
    slots_leaked: int = -1  # -1 = could not be read
    serve_again_s: float = -1.0
    notes: list[str] = field(default_factory=list)

    def row(self) -> dict:
        return asdict(self)


def stream_once(url: str, body: dict, deadline_s: float, started: threading.Event | None = None) -> StreamEnd:
    """POST a streaming completion and read it to its end (or ``deadline_s`` seconds)."""
    req = urllib.request.Request(url + "/v1/completions", json.dumps({**body, "stream": True}).encode(),
                                 {"Content-Type": "application/json"})
    text, finish = [], None
    try:
        with urllib.request.urlopen(req, timeout=deadline_s) as resp:
            for raw in resp:
                line = raw.decode(errors="replace").strip()
                if not line.startswith("data: "):
                    continue
                data = line[len("data: "):]
                if data == "[DONE]":
                    return StreamEnd("done", "".join(text), finish, time.monotonic())
                ev = json.loads(data)
                if "error" in ev:
                    return StreamEnd("error", "".join(text), None, time.monotonic(), ev["error"]["message"][:200])
                for c in ev.get("choices", []):
                    text.append(c.get("text", ""))
                    finish = c.get("finish_reason") or finish
                if started is not None:
                    started.set()
        return StreamEnd("dropped", "".join(text), finish, time.monotonic(), "closed without [DONE]")
    except urllib.error.HTTPError as exc:
        return StreamEnd("http", "".join(text), None, time.monotonic(), f"HTTP {exc.code}")
    except TimeoutError:
        return StreamEnd("hung", "".join(text), None, time.monotonic(), f"no end within {deadline_s} s")
    except (urllib.error.URLError, OSError) as exc:
        return StreamEnd("dropped", "".join(text), None, time.monotonic(), repr(exc)[:200])


def run_streams(url: str, bodies: list[dict], deadline_s: float, during=None) -> list[StreamEnd]:
    """Run every body as a concurrent stream; ``during()`` is called once each has produced
    its first chunk (or after 30 s), and returns the fault time."""
    ends: list[StreamEnd | None] = [None] * len(bodies)
    started = [threading.Event() for _ in bodies]

    def one(i: int) -> None:
        ends[i] = stream_once(url, bodies[i], deadline_s, started[i])
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(bodies))]
    for t in threads:
        t.start()
    if during is not None:
        limit = time.monotonic() + 30
        for ev in started:
            ev.wait(max(0.0, limit - time.monotonic()))
        during()
    for t in threads:
        t.join(deadline_s + 5)
    return [e or StreamEnd("hung", detail="thread did not finish") for e in ends]


def service_pid(launcher_pid: int, service: str) -> int:
    """Pid of the launcher's child running ``treespec.cli <service>`` (first replica)."""
    for p in psutil.Process(launcher_pid).children(recursive=True):
        try:
            if service in p.cmdline()[3:5]:
                return p.pid
        except psutil.Error:
            continue
    raise LookupError(f"no {service} process under pid {launcher_pid}")


def inject(launcher_pid: int, service: str, fault: str) -> float:
    """kill -9, or SIGSTOP for STOP_S seconds (SIGCONT from a timer); returns the fault time."""
    pid = service_pid(launcher_pid, service)
    t = time.monotonic()
    if fault == "kill":
        os.kill(pid, signal.SIGKILL)
    else:
        os.kill(pid, signal.SIGSTOP)
        threading.Timer(STOP_S, lambda: _cont(pid)).start()
    return t


def _cont(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def wait_serving(url: str, since: float, timeout_s: float) -> float:
    """Seconds from ``since`` until a 4-token completion succeeds (-1 after ``timeout_s``)."""
    body = json.dumps({"prompt": "def f():", "max_tokens": 4, "temperature": 0.0}).encode()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                if r.status == 200:
                    return time.monotonic() - since
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(PROBE_S)
    return -1.0


def slots_used(url: str) -> int:
    """KV slots held over every worker, from the gateway's /metrics (-1 when unreadable)."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
            lines = r.read().decode().splitlines()
    except (urllib.error.URLError, OSError):
        return -1
    return int(sum(float(ln.rsplit(" ", 1)[1]) for ln in lines if ln.startswith("treespec:kv_slots_used{")))


def settle_slots(url: str, timeout_s: float) -> int:
    """Wait (up to ``timeout_s``) for the slots to drain to 0; returns the last count."""
    deadline = time.monotonic() + timeout_s
    n = slots_used(url)
    while n != 0 and time.monotonic() < deadline:
        time.sleep(1.0)
        n = slots_used(url)
    return n


def classify(service: str, fault: str, ends: list[StreamEnd], reference: list[str], fault_t: float) -> FaultResult:
    """Count each stream's outcome against the reference texts."""
    res = FaultResult(service, fault)
    for end, ref in zip(ends, reference):
        if end.kind == "done":
            if end.text == ref:
                res.identical += 1
            else:
                res.different += 1
        elif end.kind in ("error", "http"):
            res.failed_clean += 1
            res.failed_max_s = max(res.failed_max_s, round(end.ended_s - fault_t, 2))
            res.notes.append(end.detail)
        elif end.kind == "dropped":
            res.dropped += 1
            res.notes.append(end.detail)
        else:
            res.hung += 1
    res.notes = sorted(set(res.notes))[:4]
    return res


def bodies_for(prompts: list[str], max_tokens: int) -> list[dict]:
    """Greedy completion bodies (ignore_eos: every stream runs its full length)."""
    return [{"prompt": p, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True} for p in prompts]


def reference_texts(url: str, bodies: list[dict], deadline_s: float) -> list[str]:
    """The fault-free greedy texts (the same concurrent batch, no fault)."""
    ends = run_streams(url, bodies, deadline_s)
    bad = [e for e in ends if e.kind != "done"]
    if bad:
        raise RuntimeError(f"reference run failed: {bad[0]}")
    return [e.text for e in ends]


def run_fault(launcher_pid: int, url: str, service: str, fault: str, bodies: list[dict], reference: list[str],
              deadline_s: float, recover_s: float) -> FaultResult:
    """One fault during ``len(bodies)`` concurrent streams, fully classified (see module doc)."""
    when: list[float] = []
    serve: list[float] = []
    probe = threading.Thread(target=lambda: serve.append(wait_serving(url, when[0], recover_s)), daemon=True)

    def fault_then_probe() -> None:  # the probe runs beside the streams (needs max_running > streams)
        when.append(inject(launcher_pid, service, fault))
        probe.start()
    ends = run_streams(url, bodies, deadline_s, fault_then_probe)
    res = classify(service, fault, ends, reference, when[0])
    probe.join(recover_s + 30)
    res.serve_again_s = round(serve[0], 2) if serve else -1.0
    res.slots_leaked = settle_slots(url, recover_s)
    return res


def table(results: list[FaultResult]) -> str:
    """A Markdown table of fault results."""
    head = ("| service | fault | identical | other text | failed cleanly (max s) | dropped | hung | slots leaked "
            "| serves again (s) |\n|---|---|---|---|---|---|---|---|---|\n")
    rows = [f"| {r.service} | {r.fault} | {r.identical} | {r.different} | {r.failed_clean} ({r.failed_max_s}) "
            f"| {r.dropped} | {r.hung} | {r.slots_leaked} | {r.serve_again_s} |" for r in results]
    return head + "\n".join(rows) + "\n"
