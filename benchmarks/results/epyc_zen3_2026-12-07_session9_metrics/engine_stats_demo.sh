#!/bin/bash
# Real `treespec up` with stats_log_interval_s=3: four 64-token completions at once, then the scheduler's
# "engine stats" lines (treespec logs).
set -u
cd "$(dirname "$0")/../../.."
date -u; lscpu | grep 'Model name'; git log --oneline -1
rm -rf /tmp/treespec_stats_demo_logs
.venv/bin/treespec up --set stats_log_interval_s=3 --set log_dir=/tmp/treespec_stats_demo_logs \
  > /tmp/treespec_stats_demo_up.out 2>&1 &
UP=$!
for i in $(seq 1 300); do curl -sf localhost:8000/health > /dev/null && break; sleep 1; done
echo "health after ${i}s"
PIDS=""
for p in 'def quicksort(xs):' 'def binary_search(xs, x):' 'class Stack:' 'def fibonacci(n):'; do
  curl -s -o /dev/null -w "HTTP %{http_code} %{time_total} s\n" localhost:8000/v1/completions -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"$p\",\"max_tokens\":64,\"temperature\":0,\"ignore_eos\":true}" & PIDS="$PIDS $!"
done
wait $PIDS
sleep 4
kill -INT $UP; wait $UP; echo "treespec up rc=$?"
.venv/bin/treespec logs --log-dir /tmp/treespec_stats_demo_logs --service scheduler --color never 2>&1 | grep "engine stats"
grep -h '"engine stats"' /tmp/treespec_stats_demo_logs/scheduler*.log
