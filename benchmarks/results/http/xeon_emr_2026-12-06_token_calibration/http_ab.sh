#!/bin/bash
# Alternated HTTP A/B runs: for each arm of ARMS, benchmarks/service_http.sh ab in the git worktree $WORK/wt_<arm>;
# LV: the concurrency levels (default 8). Used by this folder and by ../epyc_zen3_2026-12-07/.
set -u
mkdir -p ${WORK:-/tmp/ab}/ab
i=${START:-0}
for arm in ${ARMS:-new old old new new old}; do
  i=$((i+1)); tree=${WORK:-/tmp/ab}/wt_$arm; out=${WORK:-/tmp/ab}/ab/r${i}_$arm; mkdir -p $out
  before=$(ls -td /tmp/tmp.* 2>/dev/null | head -1)
  (cd $tree && PYTHONPATH=$tree OUT=$out LEVELS=${LV:-8} REPEAT=2 timeout 900 bash benchmarks/service_http.sh ab > $out/out.txt 2>&1)
  logs=$(ls -td /tmp/tmp.* | head -1); [ "$logs" != "$before" ] && cp $logs/scheduler-0.log $out/scheduler.log
  echo "$(date +%H:%M) r$i $arm $(grep speedup_vs_plain $out/out.txt)" >> ${WORK:-/tmp/ab}/ab/summary.txt
done
echo done >> ${WORK:-/tmp/ab}/ab/summary.txt
