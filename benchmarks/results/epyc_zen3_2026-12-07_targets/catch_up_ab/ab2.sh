#!/usr/bin/env bash
# continue the ABBA: after run 4 (old), six more runs new old old new new old
set -x
D=/work/s60/ab
while [ ! -s $D/sb16_9_old.json ]; do sleep 5; done
pkill -f /work/s60/ab.sh; sleep 1; pkill -f "treespec bench --dataset spec_bench --limit 24"; sleep 3
DS=spec_bench:mt_bench,translation,qa,math_reasoning
i=12
for arm in new old old new new old; do
  cd /work/s60/wt_$arm
  date -u +%T > $D/sb16_${i}_$arm.t
  PYTHONPATH=$PWD .venv/bin/treespec bench --dataset $DS --limit 16 --max-new-tokens 128 --json $D/sb16_${i}_$arm.json > $D/sb16_${i}_$arm.log 2>&1
  i=$((i+3))
done
date -u +%T > $D/ab2_done.t
