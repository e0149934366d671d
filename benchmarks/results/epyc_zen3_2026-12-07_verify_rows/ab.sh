#!/usr/bin/env bash
# In process, 16 Spec-Bench prompts (MT-Bench, translation, QA, math; 128 tokens), runs alternating two commits.
# OLD and NEW: git worktrees of the two commits, each with a .venv (a symlink to the main checkout's works);
# PYTHONPATH makes each run import its own tree. OUT: where the JSON goes; ARMS: the order of the runs.
#   OLD=/tmp/wt_old NEW=/tmp/wt_new OUT=sdpa_margin_ab ARMS="old new new old new old old new" bash ab.sh
set -x
DS=spec_bench:mt_bench,translation,qa,math_reasoning
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
i=0
for arm in ${ARMS:-old new new old new old old new}; do
  tree=$OLD; [ $arm = new ] && tree=$NEW
  echo "sb16_${i}_$arm $(date -u +%T)" >> $OUT/start_times.txt
  (cd $tree && PYTHONPATH=$tree .venv/bin/treespec bench --dataset $DS --limit 16 --max-new-tokens 128 --json $OUT/sb16_${i}_$arm.json > $OUT/sb16_${i}_$arm.log 2>&1)
  i=$((i + 3))
done
