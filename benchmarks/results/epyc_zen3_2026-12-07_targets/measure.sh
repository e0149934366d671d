#!/usr/bin/env bash
# Zen 3 host, 2026-12-07: issue 15's targets not yet measured on this host, one after another (run 02:45-03:34 UTC;
# the start of each step is in times.txt). Needs port 8000 free.
set -x
cd "$(dirname "$0")/../../.."
R=benchmarks/results/epyc_zen3_2026-12-07_targets
lscpu > $R/lscpu.txt
PYTHONPATH=$PWD .venv/bin/python benchmarks/prefix_cache.py --questions 3 --short-new-tokens 8 --scenarios shared_system --json $R/ttft_1500_treespec.json > $R/ttft.log 2>&1
.venv/bin/treespec bench --dataset humaneval --limit 20 --max-new-tokens 128 --json $R/humaneval20.json > $R/humaneval20.log 2>&1
OUT=$R/http1 LEVELS=1 REPEAT=2 bash benchmarks/service_http.sh ab > $R/http1.log 2>&1
.venv/bin/treespec bench --dataset spec_bench --limit 24 --max-new-tokens 128 --json $R/spec_bench24.json > $R/spec_bench24.log 2>&1
# one HTTP stream against the same engine in this process, prompt by prompt
logs=$(mktemp -d)
.venv/bin/treespec up --set log_dir=$logs > $logs/up.out 2>&1 &
pid=$!
for _ in $(seq 1 300); do curl -sf localhost:8000/health > /dev/null && break; sleep 2; done
.venv/bin/treespec bench --url http://127.0.0.1:8000 --baseline in-process --dataset humaneval --limit 8 --max-new-tokens 128 --repeat 2 --json $R/http_vs_inprocess_c1.json > $R/http_vs_inprocess_c1.log 2>&1
kill -INT $pid; wait $pid
PYTHONPATH=$PWD .venv/bin/python $R/prefill_profile.py 1536 0,512,256,128 2 > $R/prefill_profile.log 2>&1
