#!/bin/bash
# 8 HTTP streams, REPEAT=3 mirrored, new (main) then old (6c167bb worktree); scheduler logs kept
set -u
for arm in new old; do
  tree=/work/main; [ $arm = old ] && tree=/work/s56/wt
  before=$(ls -d /tmp/tmp.* 2>/dev/null | sort)
  (cd $tree && PYTHONPATH=$tree OUT=/work/s56/http_$arm LEVELS=8 REPEAT=3 bash benchmarks/service_http.sh ab) > /work/s56/http_$arm.log 2>&1
  d=$(ls -td /tmp/tmp.* | head -1); cp $d/scheduler*.log /work/s56/http_$arm/ 2>/dev/null; ls $d > /work/s56/http_$arm/logdir.txt
done
