#!/bin/bash
# ABBAAB in-process bench at 16 tokens: old (6c167bb worktree) vs new (main)
for arm in old new new old old new; do
  tree=/work/main; [ $arm = old ] && tree=/work/s56/wt
  i=$((${i:-0}+1))
  PYTHONPATH=$tree /work/main/.venv/bin/python -c "import sys, treespec.cli as c; sys.argv=['treespec','bench','--dataset','humaneval','--limit','8','--max-new-tokens','16','--concurrency','8','--json','/work/s56/ab_${i}_$arm.json']; sys.exit(c.main())" > /work/s56/ab_${i}_$arm.log 2>&1
done
