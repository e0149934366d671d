#!/usr/bin/env bash
# A/B in-process bench: new (working tree) vs old (HEAD worktree), w4a8 main, HumanEval
set -u
OUT=$1; LIMIT=${2:-5}; Q=${3:-w4a8}; ARMS=${4:-"new old"}
mkdir -p $OUT
for arm in $ARMS; do
  dir=${REPO:-/work/main}; [ $arm = old ] && dir=${OLD:-/work/s46/old}
  echo "$(date +%T) $arm start" >> $OUT/progress.txt
  (cd $dir && PYTHONPATH=$dir OMP_NUM_THREADS=2 ${REPO:-/work/main}/.venv/bin/python -m treespec.cli bench --dataset humaneval --limit $LIMIT \
     --max-new-tokens 128 --main-quantization $Q --json $OUT/${arm}_$Q.json > $OUT/${arm}_$Q.txt 2>&1)
  echo "$(date +%T) $arm done rc=$?" >> $OUT/progress.txt
done
