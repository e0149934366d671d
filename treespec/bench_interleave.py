"""``treespec bench --url URL --baseline in-process``: one stream over HTTP against the same
speculative decoding in this process, prompt by prompt, on the same host at nearly the same time.

The 2-core hosts here drift by a third within minutes, so an HTTP run and an in-process run made one
after the other compare two hosts. Here every prompt runs once per repeat in each arm, the arms'
order mirrored from one pair to the next (HTTP, local, local, HTTP, ...), so a steady drift slows
both alike. The arm "local" is an engine built in this process from the bench's own config
(``--config`` and the model flags: pass what the deployment was started with); "http" is one
streaming request to the deployment (greedy, EOS ignored, as ``treespec bench --url``). Both arms
run with speculation on and ``tree_size`` as configured (``speculation=False``: both decode plainly). Reported per arm: tokens/s (all tokens /
all request seconds, the time to first token included), time to first token and inter-token
latency p50 (ms), and per pair the ratio http/local, whose median is the figure least moved by
the host's drift. Whether both arms produced the same text is recorded, not asserted: the
deployment's verifier may round bf16 differently at a near-tie.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import aiohttp

from treespec.bench_data import Prompt
from treespec.bench_http import REQUEST_TIMEOUT_S, BenchHttpError, Stream, percentile_ms, stream_one
from treespec.bench_run import run_one

HTTP, LOCAL = "http", "local"
PAUSE_S = 0.3  # between arms: lets the other side's worker threads stop spinning
HEALTH_TIMEOUT_S = 10.0


async def _health(url: str) -> int:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HEALTH_TIMEOUT_S)) as session:
        async with session.get(url + "/health") as resp:
            return resp.status


def check_ready(url: str) -> None:
    """Raise BenchHttpError unless ``url``/health answers 200 (checked before any model loads here).
    aiohttp.ClientError / OSError / TimeoutError pass through when nothing answers."""
    status = asyncio.run(_health(url.rstrip("/")))
    if status != 200:
        raise BenchHttpError(f"/health answered HTTP {status}: the deployment is not ready")


def pair_order(index: int) -> list[str]:
    """The arms of the ``index``-th pair, mirrored from one pair to the next."""
    return [HTTP, LOCAL] if index % 2 == 0 else [LOCAL, HTTP]


async def _http_once(url: str, prompt: Prompt, max_new: int, speculation: bool = True) -> Stream:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)) as session:
        return await stream_one(session, url, prompt, max_new, speculation)


def measure_pair(url: str, engine, tok, prompt: Prompt, ids: list[int], max_new: int, index: int,
                 speculation: bool = True) -> dict:
    """Run ``prompt`` once over HTTP and once on the in-process ``engine`` in ``pair_order(index)``;
    ``speculation`` False sends ``"speculation": false`` (pair it with a plain ``engine``).

    Returns {arm: {"tokens", "seconds", "ttft_s", "itl_s"}} plus "identical_text" (bool).
    Raises BenchHttpError / aiohttp.ClientError when the deployment refuses or breaks the stream."""
    out: dict = {}
    texts: dict[str, str] = {}
    for arm in pair_order(index):
        time.sleep(PAUSE_S)
        if arm == HTTP:
            s = asyncio.run(_http_once(url, prompt, max_new, speculation))
            done = time.perf_counter()
            ttft = (s.first or done) - s.start
            out[HTTP] = {"tokens": s.tokens, "seconds": done - s.start, "ttft_s": ttft, "itl_s": s.itl}
            texts[HTTP] = "".join(s.text)
        else:
            r = run_one(engine, f"interleave-{index}", ids, max_new, False, ignore_eos=True)
            out[LOCAL] = {"tokens": len(r.tokens), "seconds": r.seconds, "ttft_s": r.ttft, "itl_s": r.itl}
            texts[LOCAL] = tok.decode(r.tokens, skip_special_tokens=True)
    out["identical_text"] = texts[HTTP] == texts[LOCAL]
    return out


def arm_row(pairs: list[dict], arm: str) -> dict:
    """Pooled figures of one arm: tokens/s (sum tokens / sum seconds), TTFT and ITL p50 (ms)."""
    tokens = sum(p[arm]["tokens"] for p in pairs)
    secs = sum(p[arm]["seconds"] for p in pairs)
    return {"arm": arm, "requests": len(pairs), "tokens": tokens, "seconds": secs,
            "tokens_per_s": tokens / secs if secs > 0 else 0.0,
            "ttft_p50_ms": percentile_ms([p[arm]["ttft_s"] for p in pairs], 0.5),
            "itl_p50_ms": percentile_ms([x for p in pairs for x in p[arm]["itl_s"]], 0.5)}


def summarize(pairs: list[dict]) -> dict:
    """Both arms' rows, the pooled ratio http/local and the median of the per-pair ratios."""
    http, local = arm_row(pairs, HTTP), arm_row(pairs, LOCAL)
    per_pair = [(p[HTTP]["tokens"] / p[HTTP]["seconds"]) / (p[LOCAL]["tokens"] / p[LOCAL]["seconds"])
                for p in pairs if p[HTTP]["seconds"] > 0 and p[LOCAL]["seconds"] > 0 and p[LOCAL]["tokens"]]
    return {"http": http, "local": local,
            "ratio_http_vs_local": http["tokens_per_s"] / local["tokens_per_s"] if local["tokens_per_s"] else 0.0,
            "ratio_median_of_pairs": statistics.median(per_pair) if per_pair else 0.0,
            "per_pair_ratios": per_pair, "identical_text": sum(p["identical_text"] for p in pairs)}


def interleave(url: str, engine, tok, prompts: list[Prompt], ids: list[list[int]], max_new: int,
               repeat: int, progress=print, speculation: bool = True) -> dict:
    """Every prompt ``repeat`` times in both arms (``measure_pair``), after one untimed warm-up
    request on each arm; returns ``summarize`` of the pairs plus the raw pairs (without ITL lists).
    ``speculation`` False compares plain decoding (a plain ``engine``; requests with speculation off)."""
    url = url.rstrip("/")
    run_one(engine, "interleave-warm", ids[0], 16, False, ignore_eos=True)
    asyncio.run(_http_once(url, prompts[0], 16, speculation))
    pairs = []
    for r in range(repeat):
        for i, (p, x) in enumerate(zip(prompts, ids)):
            pairs.append(measure_pair(url, engine, tok, p, x, max_new, len(pairs), speculation))
            h, lo = pairs[-1][HTTP], pairs[-1][LOCAL]
            progress(f"pair {len(pairs)} ({pair_order(len(pairs) - 1)[0]} first): http "
                     f"{h['tokens'] / h['seconds']:.2f} tok/s, local {lo['tokens'] / lo['seconds']:.2f} tok/s")
    raw = [{arm: {k: v for k, v in p[arm].items() if k != "itl_s"} for arm in (HTTP, LOCAL)}
           | {"identical_text": p["identical_text"]} for p in pairs]
    return summarize(pairs) | {"pairs": raw}
