#!/bin/bash
# Real pair behind `treespec up`: one chat completion streamed, one 400, one 404, one client that leaves,
# then /metrics' request counters and the gateway's "request finished" log lines.
set -u
cd "$(dirname "$0")/../../.."
date -u; lscpu | grep 'Model name'; git log --oneline -1
rm -rf /tmp/treespec_metrics_demo_logs
.venv/bin/treespec up --set log_dir=/tmp/treespec_metrics_demo_logs > /tmp/treespec_metrics_demo_up.out 2>&1 &
UP=$!
for i in $(seq 1 300); do curl -sf localhost:8000/health > /dev/null && break; sleep 1; done
echo "health after ${i}s: $(curl -s localhost:8000/health)"
curl -sN localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Write a Python function that adds two numbers."}],"max_tokens":32,"stream":true}' | tail -3
echo; curl -s -o /dev/null -w 'bad max_tokens: %{http_code}\n' localhost:8000/v1/completions -H 'Content-Type: application/json' -d '{"prompt":"hi","max_tokens":-5}'
curl -s -o /dev/null -w 'unknown path: %{http_code}\n' localhost:8000/v1/secret/abc
curl -s -m 1 -o /dev/null localhost:8000/v1/completions -H 'Content-Type: application/json' -d '{"prompt":"def fib(n):","max_tokens":200}'; echo "client left after 1 s: curl rc=$?"
sleep 3
curl -s localhost:8000/metrics | grep -E '^treespec:(http_)?requests_total'
kill -INT $UP; wait $UP; echo "treespec up rc=$?"
grep -h '"request finished"' /tmp/treespec_metrics_demo_logs/gateway*.log | cut -c1-300
