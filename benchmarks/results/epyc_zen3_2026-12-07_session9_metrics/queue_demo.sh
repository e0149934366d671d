#!/bin/bash
# Real pair behind `treespec up` with max_running=1: two requests sent together, so the second waits in the
# scheduler's queue for the first; then /metrics' queue-time and TTFT histograms.
set -u
cd "$(dirname "$0")/../../.."
date -u; lscpu | grep 'Model name'; git log --oneline -1
rm -rf /tmp/treespec_queue_demo_logs
.venv/bin/treespec up --set max_running=1 --set log_dir=/tmp/treespec_queue_demo_logs > /tmp/treespec_queue_demo_up.out 2>&1 &
UP=$!
for i in $(seq 1 300); do curl -sf localhost:8000/health > /dev/null && break; sleep 1; done
echo "health after ${i}s"
req() { curl -s -o /dev/null -w "$1: HTTP %{http_code}, %{time_total} s\n" localhost:8000/v1/completions \
  -H 'Content-Type: application/json' -d "{\"prompt\":\"$2\",\"max_tokens\":24,\"temperature\":0}"; }
req first 'def quicksort(xs):' & A=$!; sleep 0.2; req second 'def binary_search(xs, x):' & B=$!; wait $A $B
sleep 1
curl -s localhost:8000/metrics | grep -E '^treespec:(request_queue_time_seconds|time_to_first_token_seconds)_(sum|count)'
kill -INT $UP; wait $UP; echo "treespec up rc=$?"
grep -h '"request finished"' /tmp/treespec_queue_demo_logs/gateway*.log | cut -c1-220
