#!/usr/bin/env bash
# In process, runs alternating two commits (git worktrees OLD and NEW, each with a .venv symlink; PYTHONPATH makes
# each run import its own tree): HumanEval (LIMIT_HE prompts) then Spec-Bench's short-answer categories (LIMIT_SB),
# 128 tokens, plain and trees interleaved per prompt inside each run. OUT: where the JSON goes; ARMS: run order.
#   OLD=/tmp/wt_old NEW=/tmp/wt_new OUT=e2e_ab ARMS="old new new old" bash ab_e2e.sh
set -x
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
i=0
for arm in ${ARMS:-old new new old}; do
  tree=$OLD; [ $arm = new ] && tree=$NEW
  for ds in humaneval spec_bench:mt_bench,translation,qa,math_reasoning; do
    name=${ds%%:*}_${i}_$arm; limit=${LIMIT_HE:-8}; [ $ds = humaneval ] || limit=${LIMIT_SB:-16}
    echo "$name $(date -u +%T)" >> $OUT/start_times.txt
    (cd $tree && PYTHONPATH=$tree .venv/bin/treespec bench --dataset $ds --limit $limit --max-new-tokens 128 \
      --json $OUT/$name.json > $OUT/$name.log 2>&1)
  done
  i=$((i + 1))
done
