#!/usr/bin/env bash
# W4A8 kernel A/B: scripts/bench_packed_stream.py --formats int4 in an old and a new checkout, alternating, one script.
# usage: OLD=/path/to/old/worktree NEW=/path/to/new/worktree bash ab.sh OUT   (the old worktree: git worktree add ... 7ff13e8)
set -eu
OUT=$(realpath -m "$1"); mkdir -p "$OUT"; PY=${PY:-$NEW/.venv/bin/python}
for i in 1 2; do
  for side in old new; do
    dir=$OLD; [ $side = new ] && dir=$NEW
    (cd "$dir" && PYTHONPATH="$dir" "$PY" scripts/bench_packed_stream.py --formats int4 --reps 3 --out "$OUT/${side}_$i.json")
  done
done
