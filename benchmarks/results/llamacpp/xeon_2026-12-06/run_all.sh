#!/usr/bin/env bash
# Session 52 measurement driver (Intel Xeon, AMX host): run from the repository root.
# usage: bash run_all.sh OUT
set -u
OUT=$1; mkdir -p $OUT
lscpu > $OUT/lscpu.txt; git rev-parse HEAD > $OUT/commit.txt
log() { echo "$(date -u +%T) $*" >> $OUT/progress.txt; }
log start
OUT=$OUT/side_by_side MAIN_QUANT=w4a8 bash benchmarks/side_by_side.sh humaneval 10 128 > $OUT/side_by_side.log 2>&1
log "side_by_side rc=$?"
PYTHONPATH=$PWD OMP_NUM_THREADS=2 .venv/bin/python benchmarks/prefix_cache.py --questions 3 --short-new-tokens 8 \
  --scenarios shared_system --json $OUT/ttft_1500_treespec.json > $OUT/ttft.log 2>&1
log "ttft rc=$?"
OMP_NUM_THREADS=2 .venv/bin/python -m treespec.cli bench --dataset spec_bench --limit 24 --max-new-tokens 128 \
  --json $OUT/spec_bench24_bf16.json > $OUT/spec_bench.log 2>&1
log "spec_bench rc=$?"
LEVELS=1,4,8 OUT=$OUT/http bash benchmarks/service_http.sh ab > $OUT/http.log 2>&1
log "http rc=$?"
