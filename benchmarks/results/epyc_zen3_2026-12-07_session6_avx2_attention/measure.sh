#!/usr/bin/env bash
# Zen 3 host, 2026-12-07, sixth session: OLD = 789cd19, NEW = a98dd2f (AVX2 exact attention), run 14:36-14:58 UTC.
# After the HumanEval A/B: (1) long output, 2,048 tokens (--ignore-eos), old then new; (2) time to first token of a
# ~1,536-token prompt with a w4a8 main (exact attention in every prefill), old then new, then new then old.
set -x
R=${R:-$(pwd)}  # results folder
tree() { if [ "$1" = new ]; then echo "$NEW"; else echo "$OLD"; fi; }  # OLD, NEW: worktrees with a .venv
date -u +%H:%M:%S > $R/times.txt
for arm in old new; do
  (cd $(tree $arm) && PYTHONPATH=$PWD .venv/bin/treespec bench --dataset humaneval --limit 1 --max-new-tokens 2048 --ignore-eos \
     --json $R/long_$arm.json > $R/long_$arm.log 2>&1)
  echo "long_$arm done $(date -u +%H:%M:%S)" >> $R/times.txt
done
for arm in old new new old; do
  n=$(ls $R | grep -c "^ttft_w4a8_.*_$arm.json")
  (cd $(tree $arm) && TREESPEC_MAIN_QUANTIZATION=w4a8 PYTHONPATH=$PWD .venv/bin/python benchmarks/prefix_cache.py --questions 2 \
     --short-new-tokens 8 --scenarios shared_system --json $R/ttft_w4a8_${n}_$arm.json > $R/ttft_w4a8_${n}_$arm.log 2>&1)
  echo "ttft_w4a8_${n}_$arm done $(date -u +%H:%M:%S)" >> $R/times.txt
done
# (3) one draft (0.5B, W4A8) forward of 1/2/4/8 chain rows after 256 cached tokens, old then new
for arm in old new; do
  (cd $(tree $arm) && PYTHONPATH=$PWD .venv/bin/python benchmarks/results/kernels/avx2_six_row_blocks_zen3_2026-12-07/draft_probe.py 1 2 4 8 > $R/draft_probe_$arm.txt 2>&1)
  echo "draft_probe_$arm done $(date -u +%H:%M:%S)" >> $R/times.txt
done
