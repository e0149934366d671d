#!/usr/bin/env bash
# Zen 3 host, 2026-12-07, fifth session: two of issue 15's targets again at 664c5ac (run 12:43-13:01 UTC; each step's
# start in the folders' times.txt). Needs port 8000 free and llama.cpp built (bash benchmarks/llamacpp.sh).
set -x
cd "$(dirname "$0")/../../.."
R=benchmarks/results/epyc_zen3_2026-12-07_session5
B=$(bash benchmarks/llamacpp.sh)
G=${TREESPEC_CACHE:-$HOME/.cache/treespec}/llamacpp/qwen2.5-coder-1.5b-instruct.bf16.gguf
lscpu > $R/lscpu.txt
# 1. time to first token of a ~1,536-token prompt: llama.cpp BF16 pp1536, treespec (prefix cache off and on), llama.cpp again
date -u +%H:%M:%S > $R/ttft/times.txt
$B/llama-bench -m $G -t 2 -p 1536 -n 0 -r 2 -o json > $R/ttft/llama_bf16_pp1536_before.json
date -u +%H:%M:%S >> $R/ttft/times.txt
PYTHONPATH=$PWD .venv/bin/python benchmarks/prefix_cache.py --questions 3 --short-new-tokens 8 --scenarios shared_system --json $R/ttft/ttft_1500_treespec.json > $R/ttft/ttft.log 2>&1
date -u +%H:%M:%S >> $R/ttft/times.txt
$B/llama-bench -m $G -t 2 -p 1536 -n 0 -r 2 -o json > $R/ttft/llama_bf16_pp1536_after.json
date -u +%H:%M:%S >> $R/ttft/times.txt
# 2. one HTTP stream against the same engine in the bench's process, prompt by prompt, order mirrored (fresh `treespec up`)
logs=$(mktemp -d)
date -u +%H:%M:%S > $R/http1/times.txt
.venv/bin/treespec up --set log_dir=$logs > $logs/up.out 2>&1 &
pid=$!
for _ in $(seq 1 300); do curl -sf localhost:8000/health > /dev/null && break; sleep 2; done
date -u +%H:%M:%S >> $R/http1/times.txt
.venv/bin/treespec bench --url http://127.0.0.1:8000 --baseline in-process --dataset humaneval --limit 8 --max-new-tokens 128 --repeat 2 --json $R/http1/http_vs_inprocess_c1.json > $R/http1/http_vs_inprocess_c1.log 2>&1
date -u +%H:%M:%S >> $R/http1/times.txt
curl -s localhost:8000/metrics > $R/http1/metrics.txt
kill -INT $pid; wait $pid
# 3. 4 and 8 HTTP streams, plain and speculative requests interleaved in one deployment, two repeats in mirrored order
date -u +%H:%M:%S > $R/http48/times.txt
OUT=$R/http48 LEVELS=4,8 REPEAT=2 bash benchmarks/service_http.sh ab > $R/http48/http48.log 2>&1
date -u +%H:%M:%S >> $R/http48/times.txt
# 4. where a 1,536-token prefill's time goes now (projections vs attention), whole and in chunks of 128
PYTHONPATH=$PWD .venv/bin/python benchmarks/results/epyc_zen3_2026-12-07_targets/prefill_profile.py 1536 128,0 2 > $R/prefill_profile.log 2>&1
