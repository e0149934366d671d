#!/usr/bin/env bash
# ABBA: lookup explore grafts full (old: b9e3f0f) vs short (new: HEAD) at HTTP 1/8 streams, fresh deployment each.
set -u
OUT=${1:-/work/s45/ab8}; CONC=${2:-8}; ARMS=${3:-"new old old new"}
mkdir -p $OUT
i=0
for arm in $ARMS; do
  i=$((i+1))
  dir=/work/main; [ $arm = old ] && dir=/work/s45/old
  pkill -INT -f "treespec.cli up" ; sleep 3
  (cd $dir && PYTHONPATH=$dir /work/main/.venv/bin/python -m treespec.cli up --port 8000 > $OUT/up_${i}_$arm.log 2>&1 &)
  for t in $(seq 1 300); do curl -sf http://127.0.0.1:8000/health >/dev/null 2>&1 && break; sleep 2; done
  echo "$(date +%T) run $i arm $arm up after ${t}x2s" >> $OUT/progress.txt
  (cd $dir && PYTHONPATH=$dir /work/main/.venv/bin/python -m treespec.cli bench --url http://127.0.0.1:8000 --baseline plain \
     --concurrency $CONC --repeat 2 --dataset humaneval --limit 8 --max-new-tokens 128 --json $OUT/run${i}_$arm.json > $OUT/bench_${i}_$arm.txt 2>&1)
  echo "$(date +%T) run $i arm $arm done rc=$?" >> $OUT/progress.txt
  pkill -INT -f "treespec.cli up"; sleep 8
done
