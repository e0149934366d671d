#!/usr/bin/env bash
# A/B in-process bench: new (working tree /work/main) vs old (worktree $OLD), HumanEval
set -u
OUT=$1; LIMIT=${2:-5}; Q=${3:-w4a8}; ARMS=${4:-"new old"}; TAG=${5:-1}
mkdir -p $OUT
for arm in $ARMS; do
  dir=/work/main; [ $arm = old ] && dir=${OLD:?set OLD to the old worktree}
  echo "$(date +%T) $arm $Q start" >> $OUT/progress.txt
  (cd $dir && PYTHONPATH=$dir OMP_NUM_THREADS=2 /work/main/.venv/bin/python -m treespec.cli bench --dataset humaneval --limit $LIMIT \
     --max-new-tokens 128 --main-quantization $Q --json $OUT/${arm}_${Q}_$TAG.json > $OUT/${arm}_${Q}_$TAG.txt 2>&1)
  echo "$(date +%T) $arm $Q done rc=$?" >> $OUT/progress.txt
done
