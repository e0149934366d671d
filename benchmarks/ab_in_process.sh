#!/usr/bin/env bash
# In-process A/B of two commits: runs alternate two git worktrees (OLD and NEW, each with a .venv, e.g. a symlink to
# the main checkout's; PYTHONPATH makes each run import its own tree). Each run is `treespec bench` over every
# DATASET (plain and trees interleaved per prompt, 128 tokens), written to OUT/<dataset>_<run>_<arm>.json (+ .log);
# OUT/start_times.txt gets each run's start. Summarize with `python3 benchmarks/ab_summary.py OUT`.
#   OLD=/tmp/wt_old NEW=/tmp/wt_new OUT=ab ARMS="old new new old" \
#     DATASETS="humaneval:8 spec_bench:mt_bench,translation,qa,math_reasoning:16" bash benchmarks/ab_in_process.sh
# DATASETS: space-separated DATASET:LIMIT (DATASET as `treespec bench --dataset`, which may itself hold a colon).
set -x
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
i=0
for arm in ${ARMS:-old new new old}; do
  tree=$OLD; [ "$arm" = new ] && tree=$NEW
  for spec in ${DATASETS:-spec_bench:mt_bench,translation,qa,math_reasoning:16}; do
    ds=${spec%:*}; limit=${spec##*:}; name=${ds%%:*}_${i}_$arm
    echo "$name $(date -u +%T)" >> "$OUT/start_times.txt"
    (cd "$tree" && PYTHONPATH=$tree .venv/bin/treespec bench --dataset "$ds" --limit "$limit" --max-new-tokens 128 \
      --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1)
  done
  i=$((i + 1))
done
