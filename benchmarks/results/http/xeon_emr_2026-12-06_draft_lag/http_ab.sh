#!/bin/bash
# A/B over HTTP at 8 streams: old (2e5ce54) and new worktrees, order o n n o o n; each run one deployment
# with plain and tree requests interleaved (service_http.sh ab). Results in /work/s57/ab/.
set -u
mkdir -p /work/s57/ab
i=0
for arm in new old old new new old; do
  i=$((i+1)); tree=/work/s57/wt_$arm; out=/work/s57/ab/r${i}_$arm; mkdir -p $out
  before=$(ls -td /tmp/tmp.* 2>/dev/null | head -1)
  (cd $tree && PYTHONPATH=$tree OUT=$out LEVELS=8 REPEAT=2 timeout 900 bash benchmarks/service_http.sh ab > $out/out.txt 2>&1)
  logs=$(ls -td /tmp/tmp.* | head -1); [ "$logs" != "$before" ] && cp $logs/scheduler-0.log $out/scheduler.log
  echo "$(date +%H:%M) r$i $arm $(grep speedup_vs_plain $out/out.txt)" >> /work/s57/ab/summary.txt
done
echo done >> /work/s57/ab/summary.txt
