#!/usr/bin/env bash
# The catch-up horizon A/B as it ran (03:42-04:30 UTC): in process, 16 Spec-Bench prompts of the short-prompt
# categories, ten runs alternating 0db6a4c (old) and 23049d8 (new). OLD and NEW: git worktrees of the two commits,
# each with a .venv (a symlink to the main checkout's works); PYTHONPATH makes each run import its own tree.
#   OLD=/tmp/wt_old NEW=/tmp/wt_new bash catch_up_ab/ab.sh
set -x
D=$(cd "$(dirname "$0")" && pwd)
DS=spec_bench:mt_bench,translation,qa,math_reasoning
i=0
for arm in old new new old new old old new new old; do
  tree=$OLD; [ $arm = new ] && tree=$NEW
  date -u +%T > $D/sb16_${i}_$arm.t
  (cd $tree && PYTHONPATH=$tree .venv/bin/treespec bench --dataset $DS --limit 16 --max-new-tokens 128 --json $D/sb16_${i}_$arm.json > $D/sb16_${i}_$arm.log 2>&1)
  i=$((i + 3))
done
