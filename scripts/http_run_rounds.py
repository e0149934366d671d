"""The scheduler's rounds of each run of a ``treespec bench --url`` A/B, from a deployment's logs.

``benchmarks/service_http.sh ab`` runs one deployment (its logs in the ``log_dir`` it prints in ``up.out``'s
directory) and ``treespec bench --url ... --baseline plain [--repeat N]``, which sends every level's requests
once per run, plain and speculative runs in the order ``treespec.bench_http.run_order`` gives. This script
splits the scheduler's ``round`` events into those runs (a run spans its requests' first start to last finish,
from the gateway's ``request finished`` events) and sums each: wall time, rounds, committed tokens, and, for
rounds with and without a draft or tree nodes ("tree" and "plain" rounds; a prefill round counts as plain),
tokens per ms of worker time (draft + verify), plus the draft's total ms. Prints one line per run, or with
``--rounds K`` every round of run K (batch, draft and verify ms, tokens per sequence, tree nodes, lookup grafts).

    PYTHONPATH=. .venv/bin/python scripts/http_run_rounds.py LOG_DIR BENCH_JSON [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from treespec.bench_http import run_order
from treespec.logview import EARLIEST, parse_line


def events(path: Path, name: str) -> list[dict]:
    """The JSON log lines of ``path`` whose event is ``name``, each with ``t`` (epoch seconds)."""
    out = []
    for raw in path.read_text().splitlines():
        line = parse_line(raw, path.stem, EARLIEST)  # the log viewer's parser (treespec logs)
        if line.record is not None and line.record.get("event") == name:
            out.append({**line.record, "t": line.time.timestamp()})
    return out


def runs(bench: dict) -> list[tuple[int, bool, int]]:
    """(concurrency, speculative, requests) of every run, in the order the bench sent them."""
    repeat, prompts = bench["config"].get("repeat", 1), bench["config"]["prompts"]
    levels = list(dict.fromkeys(r["concurrency"] for r in bench["concurrency"]))
    plain = any(r["mode"] == "http-plain" for r in bench["concurrency"])
    return [(c, spec, max(c, prompts)) for k, c in enumerate(levels) for spec in run_order(k, repeat, plain)]


def summary(rounds: list[dict]) -> str:
    """Tokens, worker seconds and tokens/ms of the tree rounds and of the plain rounds."""
    parts = []
    for label, tree in (("tree", True), ("plain", False)):
        rs = [r for r in rounds if bool(r["tree_nodes"] or r["draft_ms"]) == tree]
        tokens, ms = sum(sum(r["accepted"]) for r in rs), sum(r["draft_ms"] + r["verify_ms"] for r in rs)
        parts.append(f"{label} {len(rs)} rounds {tokens} tokens {ms / 1e3:.2f} s ({tokens / ms if ms else 0:.3f}/ms)")
    return " | ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log_dir", type=Path)
    ap.add_argument("bench_json", type=Path)
    ap.add_argument("--rounds", type=int, default=None, help="also print every round of this run")
    args = ap.parse_args()
    done = sorted((e["t"] - e["e2e_ms"] / 1e3, e["t"]) for e in events(args.log_dir / "gateway-0.log", "request finished"))
    rounds = events(args.log_dir / "scheduler-0.log", "round")
    at = 0
    for i, (c, spec, n) in enumerate(runs(json.loads(args.bench_json.read_text()))):
        reqs, at = done[at:at + n], at + n
        if len(reqs) < n:
            raise SystemExit(f"the gateway log has {len(done)} finished requests, fewer than the bench sent")
        start, end = reqs[0][0], max(t for _, t in reqs)
        rs = [r for r in rounds if start <= r["t"] <= end + 0.01]
        tokens = sum(sum(r["accepted"]) for r in rs)
        print(f"run {i} {c} streams {'spec ' if spec else 'plain'}: wall {end - start:.2f} s, {len(rs)} rounds, "
              f"{tokens / (end - start):.1f} tok/s | {summary(rs)} | draft {sum(r['draft_ms'] for r in rs) / 1e3:.2f} s")
        if i == args.rounds:
            for r in rs:
                print(f"   batch {r['batch']} draft {r['draft_ms']:.0f} verify {r['verify_ms']:.0f} ms "
                      f"tokens {r['accepted']} tree nodes {r['tree_nodes']} lookup grafts {r['lookup_grafts']}")


if __name__ == "__main__":
    main()
