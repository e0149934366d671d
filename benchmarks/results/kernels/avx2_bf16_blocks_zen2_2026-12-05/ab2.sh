#!/usr/bin/env bash
# kernel stream A/B then in-process bf16 A/B (second pair), one script, nothing else running
O=/work/s49/ab2; mkdir -p $O
for arm in old new; do dir=/work/main; [ $arm = old ] && dir=/work/s49/old
  (cd $dir && PYTHONPATH=$dir /work/main/.venv/bin/python scripts/bench_packed_stream.py --reps 3 --formats bf16,int8 --out $O/packed_stream_$arm.json > $O/packed_stream_$arm.txt 2>&1)
done
bash /work/s49/inproc.sh $O/inproc 10 none "old new" 2
echo done > $O/done
