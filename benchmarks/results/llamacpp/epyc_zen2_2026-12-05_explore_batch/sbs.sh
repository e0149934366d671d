#!/usr/bin/env bash
# reduced side by side: treespec w4a8 main (plain + auto trees) and llama.cpp 4-bit plain + speculative, one run
# usage: bash sbs.sh OUT [LIMIT]   (run from the repository root)
set -eu
OUT=$1; LIMIT=${2:-10}
mkdir -p $OUT
BIN="$(bash benchmarks/llamacpp.sh | tail -n 1)"
OMP_NUM_THREADS=2 .venv/bin/python -m treespec.cli bench --dataset humaneval --limit $LIMIT --max-new-tokens 128 \
  --main-quantization w4a8 --json $OUT/treespec_humaneval_w4a8.json
.venv/bin/python -m treespec.bench_llamacpp --bin "$BIN" --dataset humaneval --limit $LIMIT --max-new-tokens 128 \
  --threads 2 --bench-reps 0 --skip plain-bf16,spec-bf16 --treespec-json $OUT/treespec_humaneval_w4a8.json \
  --json $OUT/side_by_side_humaneval.json
