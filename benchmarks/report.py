"""Print the Markdown tables of BENCHMARKS.md from benchmarks/results/*.json.

Usage: .venv/bin/python benchmarks/report.py   (run after benchmarks/run_all.sh)
       .venv/bin/python benchmarks/report.py side_by_side_humaneval   (benchmarks/side_by_side.sh's table
       from benchmarks/results/llamacpp/<name>.json)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def _decode(records: list[dict], kind: str) -> float:
    toks = sum(len(r[kind]["tokens"]) - 1 for r in records)
    return toks / sum(r[kind]["seconds"] - r[kind]["ttft"] for r in records)


def comparison(name: str) -> str:
    d = json.loads((RESULTS / f"{name}.json").read_text())
    a, recs = d["aggregate"], d["records"]
    pd, sd = _decode(recs, "plain"), _decode(recs, "spec")
    rows = [
        "| metric | value |", "|---|---|",
        f"| prompts | {a['prompts']} |",
        f"| plain tokens/s (end to end, incl. prefill) | {a['plain_tokens_per_s']:.2f} |",
        f"| treespec tokens/s (end to end) | {a['spec_tokens_per_s']:.2f} |",
        f"| **speedup** (end to end) | **{a['speedup']:.2f}x** |",
        f"| plain / treespec decode tokens/s (after the first token) | {pd:.2f} / {sd:.2f} ({sd / pd:.2f}x) |",
        f"| HF assisted generation tokens/s (end to end) | {a.get('hf_assisted_tokens_per_s', float('nan')):.2f} "
        f"({a.get('hf_assisted_ratio_vs_plain', float('nan')):.2f}x plain) |",
        f"| **mean accepted length** | **{a['mean_accepted_length']:.2f}** |",
        f"| acceptance rate by depth (P[accepted >= d], d = 1..) | "
        f"{', '.join(f'{x:.2f}' for x in a['acceptance_rate_by_depth'])} |",
        f"| greedy_identical / divergences / divergences_not_ties / unclassified | {a['greedy_identical']} / "
        f"{a['greedy_divergences']} / {a['greedy_divergences_not_ties']} / "
        f"{a.get('greedy_divergences_unclassified', 0)} |",
    ]
    cats = d.get("by_category", {})
    if len(cats) > 1:
        rows += ["", "| category | prompts | plain tok/s | treespec tok/s | speedup | MAL |", "|---|---|---|---|---|---|"]
        rows += [f"| {c} | {v['prompts']} | {v['plain_tokens_per_s']:.2f} | {v['spec_tokens_per_s']:.2f} | "
                 f"{v['speedup']:.2f}x | {v['mean_accepted_length']:.2f} |" for c, v in cats.items()]
        mean = sum(v["speedup"] for v in cats.values()) / len(cats)
        rows.append(f"| **mean over categories** | | | | **{mean:.2f}x** | |")
    return "\n".join(rows)


def sweeps() -> str:
    d = json.loads((RESULTS / "sweeps.json").read_text())
    rows = ["| tree size | tokens/s | MAL |", "|---|---|---|"]
    rows += [f"| {r['tree_size']} | {r['tokens_per_s']:.2f} | {r['mean_accepted_length']:.2f} |"
             for r in d.get("tree_size_sweep", [])]
    rows += ["", "| concurrency | mode | tree | aggregate tok/s | ITL p50 ms | ITL p99 ms |", "|---|---|---|---|---|---|"]
    rows += [f"| {r['concurrency']} | {r['mode']} | {r['tree_size']} | {r['tokens_per_s']:.2f} | "
             f"{r['itl_p50_ms']:.0f} | {r['itl_p99_ms']:.0f} |" for r in d.get("concurrency", [])]
    return "\n".join(rows)


def long_run() -> str:
    d = json.loads((RESULTS / "long.json").read_text())
    rows = ["| tokens generated | plain tok/s | treespec tok/s |", "|---|---|---|"]
    by = {}
    for r in d["timeline"]:
        by.setdefault(r["tokens"], {})[r["mode"]] = r["tokens_per_s"]
    rows += [f"| {t} | {v.get('plain', 0):.2f} | {v.get('spec', 0):.2f} |" for t, v in sorted(by.items())]
    a = d["aggregate"]
    rows.append(f"\nWhole run: MAL {a['mean_accepted_length']:.2f}, speedup {a['speedup']:.2f}x, "
                f"greedy divergences not ties: {a['greedy_divergences_not_ties']}")
    return "\n".join(rows)


SERVICE_RUNS = {"plain": "plain decoding (tree_size 0)", "spec": "treespec, overlap off",
                "overlap": "treespec, overlap on (shared cores)", "pinned-off": "pinned, overlap off",
                "pinned-on": "pinned, overlap on"}


def _metric(path: Path, name: str) -> float:
    for line in path.read_text().splitlines() if path.exists() else []:
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def service() -> str:
    """benchmarks/service_http.sh: aggregate tok/s per concurrency level, per run."""
    runs = {k: json.loads((RESULTS / "service" / f"{k}.json").read_text()) for k in SERVICE_RUNS
            if (RESULTS / "service" / f"{k}.json").exists()}
    levels = [r["concurrency"] for r in next(iter(runs.values()))["concurrency"]]
    rows = ["| run | " + " | ".join(f"c={c} tok/s" for c in levels) + " | ITL p50 ms (c=1) | MAL | overlap hits/guesses |",
            "|---|" + "---|" * (len(levels) + 3)]
    for key, d in runs.items():
        m = RESULTS / "service" / f"{key}.metrics.txt"
        hits, guesses = _metric(m, "treespec:overlap_hits_total"), _metric(m, "treespec:overlap_guesses_total")
        mal = _metric(m, "treespec:mean_accepted_length")
        tps = " | ".join(f"{r['tokens_per_s']:.1f}" for r in d["concurrency"])
        rows.append(f"| {SERVICE_RUNS[key]} | {tps} | {d['concurrency'][0]['itl_p50_ms']:.0f} | "
                    f"{f'{mal:.2f}' if mal else '-'} | {f'{hits:.0f}/{guesses:.0f}' if guesses else '-'} |")
    return "\n".join(rows)


def side_by_side(name: str) -> str:
    """benchmarks/side_by_side.sh: treespec vs llama.cpp on one host (results/llamacpp/<name>.json)."""
    from treespec.bench_compare import markdown
    return markdown(json.loads((RESULTS / "llamacpp" / f"{name}.json").read_text()))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        for name in sys.argv[1:]:
            print(f"### {name}\n\n{side_by_side(name)}\n")
        sys.exit(0)
    for title, fn in (("HumanEval", lambda: comparison("humaneval")), ("Spec-Bench", lambda: comparison("spec_bench")),
                      ("Sweeps", sweeps), ("Long output", long_run), ("Service over HTTP", service)):
        try:
            print(f"### {title}\n\n{fn()}\n")
        except (FileNotFoundError, StopIteration) as exc:
            print(f"### {title}\n\n(missing: {getattr(exc, 'filename', 'results')})\n")
