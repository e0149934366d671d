"""Benchmark prompt sets: HumanEval and Spec-Bench vendored in ``benchmarks/data`` (or a path)."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parents[1] / "benchmarks" / "data"  # vendored, with SOURCE.txt + LICENSE
SPEC_BENCH_CATEGORIES = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")


@dataclass(frozen=True)
class Prompt:
    """One benchmark prompt. ``chat``: apply the chat template (instructions) or not (code completion)."""

    id: str
    category: str
    text: str
    chat: bool


def _humaneval(path: Path) -> list[Prompt]:
    with gzip.open(path, "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [Prompt(r["task_id"], "humaneval", r["prompt"], False) for r in rows]


def _spec_bench(path: Path) -> list[Prompt]:
    """First turns; MT-Bench's eight sub-categories are grouped as ``mt_bench`` and
    interleaved (writing, roleplay, ... , writing, ...) so a prefix covers all of them."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    seen: dict[str, int] = {}
    mt = []
    for r in rows:
        if r["category"] not in SPEC_BENCH_CATEGORIES:
            seen[r["category"]] = seen.get(r["category"], -1) + 1
            mt.append((seen[r["category"]], len(mt), r))
    mt = [r for _, _, r in sorted(mt, key=lambda x: (x[0], x[1]))]
    rest = [r for r in rows if r["category"] in SPEC_BENCH_CATEGORIES]
    return ([Prompt(str(r["question_id"]), "mt_bench", r["turns"][0], True) for r in mt]
            + [Prompt(str(r["question_id"]), r["category"], r["turns"][0], True) for r in rest])


def load_prompts(dataset: str, limit: int | None, data_dir: Path = DATA_DIR) -> list[Prompt]:
    """``humaneval``, ``spec_bench`` or ``spec_bench:<category>[,<category>...]``; with
    ``limit`` on several spec_bench categories (default all six) the prompts are spread
    evenly over them.

    Raises ValueError naming an unknown dataset or category, FileNotFoundError if missing.
    """
    name, _, category = dataset.partition(":")
    if name == "humaneval":
        prompts = _humaneval(data_dir / "humaneval" / "HumanEval.jsonl.gz")
    elif name == "spec_bench":
        prompts = _spec_bench(data_dir / "spec_bench" / "question.jsonl")
        cats = [c for c in category.split(",") if c] or list(SPEC_BENCH_CATEGORIES)
        bad = [c for c in cats if c not in SPEC_BENCH_CATEGORIES]
        if bad:
            raise ValueError(f"unknown spec_bench category {bad[0]!r}; one of {SPEC_BENCH_CATEGORIES}")
        if len(cats) == 1:
            prompts = [p for p in prompts if p.category == cats[0]]
        elif limit:
            per = max(1, limit // len(cats))
            prompts = [p for c in cats for p in [q for q in prompts if q.category == c][:per]]
        else:
            prompts = [p for p in prompts if p.category in cats]
    elif Path(dataset).exists():
        prompts = [Prompt(str(i), "file", line, True)
                   for i, line in enumerate(Path(dataset).read_text().splitlines()) if line.strip()]
    else:
        raise ValueError(f"unknown dataset {dataset!r}: use humaneval, spec_bench[:category] or a file path")
    return prompts[:limit] if limit else prompts
