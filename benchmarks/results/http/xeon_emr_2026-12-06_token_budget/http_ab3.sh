#!/bin/bash
# 8 HTTP streams, REPEAT=2 mirrored per arm; arms alternate new (main HEAD) / old (worktree); scheduler logs kept
set -u
i=${I0:-0}
for arm in ${ARMS:-new old new old}; do
  i=$((i+1)); tree=/work/main; [ $arm = old ] && tree=/work/s56/wt
  d=/work/s56/http_${i}_$arm
  (cd $tree && PYTHONPATH=$tree OUT=$d LEVELS=8 REPEAT=${REPEAT:-2} bash benchmarks/service_http.sh ab) > $d.log 2>&1
  l=$(ls -td /tmp/tmp.* | head -1); cp $l/scheduler*.log $d/ 2>/dev/null
done
