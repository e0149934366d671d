#!/usr/bin/env bash
# after measure.sh: one HTTP stream against the same engine in process; then the prefill profile.
set -x
cd "$(dirname "$0")/../../.."
while pgrep -f measure.sh > /dev/null; do sleep 10; done
R=benchmarks/results/epyc_zen3_2026-12-07_targets
logs=$(mktemp -d)
date -u +%FT%TZ > $R/t5_inproc
.venv/bin/treespec up --set log_dir=$logs > $logs/up.out 2>&1 &
pid=$!
for _ in $(seq 1 300); do curl -sf localhost:8000/health > /dev/null && break; sleep 2; done
.venv/bin/treespec bench --url http://127.0.0.1:8000 --baseline in-process --dataset humaneval --limit 8 --max-new-tokens 128 --repeat 2 --json $R/http_vs_inprocess_c1.json > $R/http_vs_inprocess_c1.log 2>&1
kill -INT $pid; wait $pid
date -u +%FT%TZ > $R/t6_prefill
PYTHONPATH=$PWD .venv/bin/python benchmarks/results/epyc_zen3_2026-12-07_targets/prefill_profile.py 1536 0,512,256,128 2 > benchmarks/results/epyc_zen3_2026-12-07_targets/prefill_profile.log 2>&1
date -u +%FT%TZ > $R/t7_done
