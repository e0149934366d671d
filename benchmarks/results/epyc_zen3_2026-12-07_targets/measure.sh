#!/usr/bin/env bash
# Zen 3 host, stop 60: the issue-15 targets not yet measured on this host, one after another.
set -x
cd "$(dirname "$0")/../../.."
R=benchmarks/results/epyc_zen3_2026-12-07_targets
mkdir -p $R
lscpu > $R/lscpu.txt
date -u +%FT%TZ > $R/t0_ttft
PYTHONPATH=$PWD .venv/bin/python benchmarks/prefix_cache.py --questions 3 --short-new-tokens 8 --scenarios shared_system --json $R/ttft_1500_treespec.json > $R/ttft.log 2>&1
date -u +%FT%TZ > $R/t1_he20
.venv/bin/treespec bench --dataset humaneval --limit 20 --max-new-tokens 128 --json $R/humaneval20.json > $R/humaneval20.log 2>&1
date -u +%FT%TZ > $R/t2_http1
OUT=$R/http1 LEVELS=1 REPEAT=2 bash benchmarks/service_http.sh ab > $R/http1.log 2>&1
date -u +%FT%TZ > $R/t3_specbench
.venv/bin/treespec bench --dataset spec_bench --limit 24 --max-new-tokens 128 --json $R/spec_bench24.json > $R/spec_bench24.log 2>&1
date -u +%FT%TZ > $R/t4_done
