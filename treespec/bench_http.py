"""``treespec bench --url``: throughput and latency of a running deployment over HTTP.

At each concurrency level N, every prompt is sent once as a streaming request (greedy,
``max_tokens`` = the bench's ``--max-new-tokens``, EOS ignored) with at most N in flight (a
closed loop: a finished request lets the next one start; with fewer prompts than N, the prompts
repeat until N requests fill the level), with aiohttp; chat prompts go to
/v1/chat/completions, the others to /v1/completions. Each request asks for logprobs
(top 0) so that every streamed event says how many tokens it carries. Measured per level:
aggregate tokens/s (all tokens / wall time of the level), time to first token, and the
inter-token latency (gap between events / tokens in the event, one sample per token).
With ``plain=True`` every level is run twice on the same deployment, once with
``"speculation": false`` in each request (plain decoding) and once with speculation, the
order alternating from level to level, so both see the same host at nearly the same time.
``repeat`` > 1 runs each level's pair that many times in mirrored order (plain, spec, spec,
plain, ...: a host whose speed drifts linearly within the level slows both modes alike; the
2-core hosts here drifted by half within minutes) and pools each mode's runs into one row.
With ``plain=True`` an unmeasured warm-up first sends every prompt once (1 token, speculation
off), so both modes find the prompts in the deployment's prefix cache: without it the first
measured run prefilled every prompt cold while the later ones hit the cache, and since the
first run is plain at the first level, speculation looked faster (at 8 streams on a 2-core
Zen 2 host: plain runs 13.6 and 20.3 tok/s, first and last; time to first token p50 3.6 s
against 0.42 s for the speculative runs, 2026-12-05).
Torch-free: no model is loaded here.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import aiohttp

from treespec.bench_data import Prompt

MODE = "http"
PLAIN_MODE = "http-plain"
DATA_PREFIX = b"data: "
DONE = b"[DONE]"
REQUEST_TIMEOUT_S = 600.0


class BenchHttpError(RuntimeError):
    """The server refused a request or broke a stream."""


# what a bench request can raise when the deployment refuses, breaks or never answers
HTTP_ERRORS = (BenchHttpError, aiohttp.ClientError, OSError, TimeoutError)


@dataclass
class Stream:
    """One streamed request's timings (seconds, perf_counter) and token count."""

    start: float
    first: float | None = None
    tokens: int = 0
    itl: list[float] = field(default_factory=list)  # one entry per token after the first event
    text: list[str] = field(default_factory=list)  # the streamed text pieces, in order


def request_body(prompt: Prompt, max_new: int, speculation: bool = True) -> tuple[str, dict]:
    """(path, JSON body) of a greedy streaming request for ``prompt``; ``speculation=False``
    asks the server to decode it without a token tree (treespec's request extension)."""
    common = {"max_tokens": max_new, "temperature": 0.0, "ignore_eos": True, "stream": True,
              **({} if speculation else {"speculation": False})}
    if prompt.chat:
        return "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt.text}],
                                        "logprobs": True, "top_logprobs": 0, **common}
    return "/v1/completions", {"prompt": prompt.text, "logprobs": 0, **common}


def event_text(event: dict) -> str:
    """Text carried by one streamed JSON event (chat ``delta.content`` or completion ``text``)."""
    return "".join((c.get("delta") or {}).get("content") or c.get("text") or "" for c in event.get("choices", []))


def event_tokens(event: dict) -> int:
    """Tokens carried by one streamed JSON event (from its logprobs)."""
    n = 0
    for choice in event.get("choices", []):
        lp = choice.get("logprobs") or {}
        n += len(lp.get("content") or lp.get("tokens") or [])
    return n


async def stream_one(session: aiohttp.ClientSession, url: str, prompt: Prompt, max_new: int,
                     speculation: bool = True) -> Stream:
    """Send one streaming request and time its events."""
    path, body = request_body(prompt, max_new, speculation)
    s = Stream(time.perf_counter())
    last = s.start
    async with session.post(url + path, json=body) as resp:
        if resp.status != 200:
            raise BenchHttpError(f"{path}: HTTP {resp.status}: {(await resp.text())[:300]}")
        async for line in resp.content:
            payload = line.strip()
            if not payload.startswith(DATA_PREFIX):
                continue
            payload = payload[len(DATA_PREFIX):]
            if payload == DONE:
                return s
            event = json.loads(payload)
            if "error" in event:
                raise BenchHttpError(f"{path}: stream error: {event['error'].get('message')}")
            n, now = event_tokens(event), time.perf_counter()
            s.text.append(event_text(event))
            if n and s.first is None:
                s.first = now
            elif n:
                s.itl += [(now - last) / n] * n
            s.tokens += n
            last = now if n else last
    raise BenchHttpError(f"{path}: stream ended without [DONE]")


def percentile_ms(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank, as in bench_run) in milliseconds; 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return 1e3 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_level(url: str, prompts: list[Prompt], max_new: int, speculation: bool = True,
                    in_flight: int | None = None) -> tuple[list[Stream], float]:
    """Every one of ``prompts``, at most ``in_flight`` at a time (None: all at once): the
    streams and the level's wall time (seconds)."""
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    slots = asyncio.Semaphore(in_flight or len(prompts))

    async def one(session: aiohttp.ClientSession, prompt: Prompt) -> Stream:
        async with slots:
            return await stream_one(session, url, prompt, max_new, speculation)

    async with aiohttp.ClientSession(timeout=timeout) as session:
        t0 = time.perf_counter()
        streams = await asyncio.gather(*(one(session, p) for p in prompts))
        return list(streams), time.perf_counter() - t0


def level_row(runs: list[tuple[list[Stream], float]], speculation: bool, in_flight: int) -> dict:
    """One concurrency row (mode ``http``, or ``http-plain`` when ``speculation`` is off) pooling
    ``runs`` (streams, seconds) of one mode: tokens/s = all tokens / all seconds; ``requests``
    per run; ``runs_tokens_per_s`` lists each run's own rate (its spread shows the host's drift)."""
    streams = [s for run, _ in runs for s in run]
    secs = sum(t for _, t in runs)
    total = sum(s.tokens for s in streams)
    itl = [x for s in streams for x in s.itl]
    ttft = [s.first - s.start for s in streams if s.first is not None]
    return {"mode": MODE if speculation else PLAIN_MODE, "tree_size": None, "concurrency": in_flight,
            "requests": len(runs[0][0]), "runs": len(runs), "tokens": total,
            "seconds": secs, "tokens_per_s": total / secs if secs > 0 else 0.0,
            "runs_tokens_per_s": [sum(s.tokens for s in run) / t if t > 0 else 0.0 for run, t in runs],
            "itl_p50_ms": percentile_ms(itl, 0.5), "itl_p99_ms": percentile_ms(itl, 0.99),
            "ttft_p50_ms": percentile_ms(ttft, 0.5)}


def run_order(level: int, repeat: int, plain: bool) -> list[bool]:
    """Modes (speculation on?) in the order they run at the ``level``-th level: speculative only
    without ``plain``; else ``repeat`` pairs, each the mirror of the one before (plain, spec, spec,
    plain, ...), the first pair's order alternating from level to level."""
    if not plain:
        return [True] * repeat
    first = [False, True] if level % 2 == 0 else [True, False]
    return [m for i in range(repeat) for m in (first if i % 2 == 0 else first[::-1])]


def concurrency(url: str, prompts: list[Prompt], max_new: int, levels: list[int],
                plain: bool = False, repeat: int = 1) -> list[dict]:
    """One row per level (two with ``plain``: plain and speculative, interleaved, the
    speculative row carrying ``speedup_vs_plain``); each level sends every prompt ``repeat``
    times per mode (``run_order``), at most ``c`` in flight (prompts repeated until there are
    ``c`` requests when there are fewer), after a warm-up with ``plain`` (module docstring).
    Raises ValueError for ``repeat`` < 1."""
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    url = url.rstrip("/")
    rows: list[dict] = []
    if plain:  # warm-up, unmeasured: every prompt prefilled (and cached) before either mode is timed
        asyncio.run(run_level(url, list({p.id: p for p in prompts}.values()), 1, False, max(levels)))
    for k, c in enumerate(levels):
        batch = [prompts[i % len(prompts)] for i in range(max(c, len(prompts)))]
        runs: dict[bool, list] = {False: [], True: []}
        for spec in run_order(k, repeat, plain):
            runs[spec].append(asyncio.run(run_level(url, batch, max_new, spec, c)))
        got = {spec: level_row(r, spec, c) for spec, r in runs.items() if r}
        if plain and got[False]["tokens_per_s"] > 0:
            got[True]["speedup_vs_plain"] = got[True]["tokens_per_s"] / got[False]["tokens_per_s"]
        rows += [got[spec] for spec in (False, True) if spec in got]
    return rows
