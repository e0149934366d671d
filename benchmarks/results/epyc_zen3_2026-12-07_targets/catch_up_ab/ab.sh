#!/usr/bin/env bash
# ABBA in process: Spec-Bench's short-prompt categories, old (0db6a4c) vs new (CATCH_UP_HORIZON); then new alone on Spec-Bench 24 and HumanEval 20.
set -x
D=/work/s60/ab; mkdir -p $D
DS=spec_bench:mt_bench,translation,qa,math_reasoning
for arm in old new new old; do
  n=$(ls $D | grep -c "^sb16_") ; cd /work/s60/wt_$arm
  date -u +%T > $D/sb16_${n}_$arm.t
  PYTHONPATH=$PWD .venv/bin/treespec bench --dataset $DS --limit 16 --max-new-tokens 128 --json $D/sb16_${n}_$arm.json > $D/sb16_${n}_$arm.log 2>&1
done
cd /work/s60/wt_new
date -u +%T > $D/sb24_new.t
PYTHONPATH=$PWD .venv/bin/treespec bench --dataset spec_bench --limit 24 --max-new-tokens 128 --json $D/sb24_new.json > $D/sb24_new.log 2>&1
date -u +%T > $D/he20_new.t
PYTHONPATH=$PWD .venv/bin/treespec bench --dataset humaneval --limit 20 --max-new-tokens 128 --json $D/he20_new.json > $D/he20_new.log 2>&1
date -u +%T > $D/done.t
