#!/usr/bin/env bash
# in-process int8 main A/B (old worktree a1a3597 vs new), after ab2
while [ ! -f /work/s49/ab2/done ]; do sleep 10; done
bash /work/s49/inproc.sh /work/s49/ab3/inproc 10 int8 "new old" 1
echo done > /work/s49/ab3/done
