#!/usr/bin/env bash
# Zen 3 host, 2026-12-07, seventh session: OLD = a425ea3, NEW = 3a593e8 (AVX2 exact attention: rows of one slot share
# each widened key/value block). (1) rows_ab.txt: a whole bf16 main forward + LM head over R chain rows after 512 and
# 2,048 cached tokens, mirrored old new new old; (2) ttft_w4a8/: a ~1,536-token prompt's first token with a w4a8 main
# (exact attention in every prefill row), old new new old; (3) sb_long/: Spec-Bench RAG + summarization (the long
# prompts), 8 prompts in process, plain and trees interleaved, old new new old.
# Run from the repository root (as run: the same loop as rows_ab.sh was written out inline).
set -x
R=${R:-$(pwd)}  # results folder
tree() { if [ "$1" = new ]; then echo "$NEW"; else echo "$OLD"; fi; }  # OLD, NEW: worktrees with a .venv
date -u +%H:%M:%S > $R/times.txt
R=$R OLD=$OLD NEW=$NEW bash benchmarks/results/epyc_zen3_2026-12-07_session6_avx2_attention/rows_ab.sh  # -> $R/rows_ab.txt
mkdir -p $R/ttft_w4a8
for arm in old new new old; do
  n=$(ls $R/ttft_w4a8 | grep -c "_$arm.json")
  (cd $(tree $arm) && TREESPEC_MAIN_QUANTIZATION=w4a8 PYTHONPATH=$PWD .venv/bin/python benchmarks/prefix_cache.py --questions 2 \
     --short-new-tokens 8 --scenarios shared_system --json $R/ttft_w4a8/ttft_${n}_$arm.json > $R/ttft_w4a8/ttft_${n}_$arm.log 2>&1)
  echo "ttft_${n}_$arm done $(date -u +%H:%M:%S)" >> $R/times.txt
done
OUT=$R/sb_long ARMS="old new new old" DATASETS="spec_bench:rag,summarization:8" bash benchmarks/ab_in_process.sh
echo "all done $(date -u +%H:%M:%S)" >> $R/times.txt
