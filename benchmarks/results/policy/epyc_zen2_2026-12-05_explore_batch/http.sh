#!/usr/bin/env bash
# fresh deployment per concurrency level; bench with plain baseline (warm-up) 
set -u
OUT=$1; shift
mkdir -p $OUT
for c in "$@"; do
  pkill -INT -f "treespec.cli up"; sleep 5
  (cd ${REPO:-/work/main} && PYTHONPATH=${REPO:-/work/main} .venv/bin/python -m treespec.cli up --port 8000 > $OUT/up_c$c.log 2>&1 &)
  for t in $(seq 1 300); do curl -sf http://127.0.0.1:8000/health >/dev/null 2>&1 && break; sleep 2; done
  echo "$(date +%T) c=$c up" >> $OUT/progress.txt
  start=$(date -u +%Y-%m-%dT%H:%M:%S)
  (cd ${REPO:-/work/main} && .venv/bin/treespec bench --url http://127.0.0.1:8000 --baseline plain --concurrency $c --repeat 2 \
     --dataset humaneval --limit 8 --max-new-tokens 128 --json $OUT/c$c.json > $OUT/bench_c$c.txt 2>&1)
  echo "$(date +%T) c=$c done rc=$? start=$start" >> $OUT/progress.txt
  curl -s http://127.0.0.1:8000/metrics > $OUT/c$c.metrics
  cp logs/scheduler-0.log $OUT/scheduler_c$c.log
done
pkill -INT -f "treespec.cli up"
