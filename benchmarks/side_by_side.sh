#!/usr/bin/env bash
# treespec vs llama.cpp in ONE run on this host, on the same prompts and the same GGUF files:
#   llama.cpp plain (the file's 4-bit type and BF16), llama.cpp speculative with the 0.5B draft (both),
#   llama-bench -p 256 -n 128 rows, then `treespec bench` (plain + tree speculation, tree_size auto).
# Writes benchmarks/results/llamacpp/side_by_side_<dataset>.json (+ treespec_<dataset>.json) and prints
# the Markdown table (also: .venv/bin/python benchmarks/report.py side_by_side_<dataset>).
#
#   bash benchmarks/side_by_side.sh [DATASET] [LIMIT] [MAX_NEW_TOKENS]     # default: humaneval 20 128
#
# Env: PY (python with treespec installed, default .venv/bin/python), THREADS (default 2, both engines),
#      BENCH_REPS (llama-bench repetitions, default 3), EXTRA (extra args for python -m treespec.bench_llamacpp),
#      OUT (result dir, default benchmarks/results/llamacpp),
#      MAIN_QUANT (e.g. "int4" or "int8 int4": also run `treespec bench --main-quantization Q` per value, one row
#      pair each in the table; default none).
# Run it on a quiet machine: every figure is a wall-clock throughput.
set -euo pipefail
cd "$(dirname "$0")/.."
DATASET="${1:-humaneval}"
LIMIT="${2:-20}"
MAX_NEW="${3:-128}"
PY="${PY:-.venv/bin/python}"
THREADS="${THREADS:-2}"
OUT="${OUT:-benchmarks/results/llamacpp}"
TAG="${DATASET//:/_}"
mkdir -p "$OUT"

BIN="$(bash benchmarks/llamacpp.sh | tail -n 1)"
echo "llama.cpp binaries: $BIN" >&2

# treespec first (it loads both models once), then llama.cpp; same thread count for both.
OMP_NUM_THREADS="$THREADS" "$PY" -m treespec.cli bench --dataset "$DATASET" --limit "$LIMIT" \
  --max-new-tokens "$MAX_NEW" --json "$OUT/treespec_$TAG.json"
TS_JSON=(--treespec-json "$OUT/treespec_$TAG.json")
for Q in ${MAIN_QUANT:-}; do
  OMP_NUM_THREADS="$THREADS" "$PY" -m treespec.cli bench --dataset "$DATASET" --limit "$LIMIT" \
    --max-new-tokens "$MAX_NEW" --main-quantization "$Q" --json "$OUT/treespec_${TAG}_$Q.json"
  TS_JSON+=(--treespec-json "$OUT/treespec_${TAG}_$Q.json")
done
# shellcheck disable=SC2086
"$PY" -m treespec.bench_llamacpp --bin "$BIN" --dataset "$DATASET" --limit "$LIMIT" --max-new-tokens "$MAX_NEW" \
  --threads "$THREADS" --bench-reps "${BENCH_REPS:-3}" "${TS_JSON[@]}" \
  --json "$OUT/side_by_side_$TAG.json" ${EXTRA:-}
