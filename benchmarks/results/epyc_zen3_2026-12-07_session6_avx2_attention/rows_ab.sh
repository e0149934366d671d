#!/usr/bin/env bash
# rows_probe.py (bf16 main forward + LM head over R chain rows after C cached tokens; native path with exact
# attention vs SDPA) in the old and the new tree, mirrored: old new new old, at C = 512 then 2048.
R=${R:-$(pwd)}  # results folder
tree() { if [ "$1" = new ]; then echo "$NEW"; else echo "$OLD"; fi; }  # OLD, NEW: worktrees with a .venv
P=benchmarks/results/epyc_zen3_2026-12-07_verify_rows/rows_probe.py
for C in 512 2048; do
  for arm in old new new old; do
    echo "== C $C $arm $(date -u +%H:%M:%S)" >> $R/rows_ab.txt
    (cd $(tree $arm) && PYTHONPATH=$PWD .venv/bin/python $P $C 2>/dev/null | grep -v "^\[" >> $R/rows_ab.txt)
  done
done
