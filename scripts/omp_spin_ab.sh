#!/usr/bin/env bash
# The workers' OpenMP spin count (common/openmp_env.py) A/B: fresh fixed-tree deployments, each
# measured by scripts/http_vs_inprocess_rounds.py (one HTTP stream against the same speculation
# in this process, prompt by prompt in mirrored order; the in-process arm keeps libgomp's default).
# Arms in ABBA order (PAIRS times): "libgomp" = GOMP_SPINCOUNT=300000 for the deployment (libgomp's own default),
# "worker" = nothing set (the CLI gives draft and verifier GOMP_SPINCOUNT=30000).
#   bash scripts/omp_spin_ab.sh OUT_DIR [PROMPTS=8] [TREE_SIZE=8] [PAIRS=1]
# Writes OUT_DIR/<n>_<arm>.json and .txt; needs the port 8000 free (stops only what it started).
set -euo pipefail
out=${1:?usage: omp_spin_ab.sh OUT_DIR [PROMPTS] [TREE_SIZE] [PAIRS]}; prompts=${2:-8}; tree=${3:-8}; pairs=${4:-1}
root=$(cd "$(dirname "$0")/.." && pwd); py="$root/.venv/bin/python"
mkdir -p "$out"
run_arm() {  # run_arm N ARM: N numbers the runs
  local n=$1 arm=$2 logs="$out/deploy_$1_$2" spin=()
  [ "$arm" = libgomp ] && spin=(GOMP_SPINCOUNT=300000)
  env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY "${spin[@]}" "$py" -m treespec.cli up --tree-size "$tree" \
    --set log_dir="$logs" > "$logs.out" 2>&1 &
  local pid=$!
  for _ in $(seq 1 120); do grep -q 'treespec up: ready' "$logs.out" 2> /dev/null && break; sleep 5; done
  env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY PYTHONPATH="$root:$root/scripts" "$py" \
    "$root/scripts/http_vs_inprocess_rounds.py" "$logs/scheduler-0.log" --tree-size "$tree" --limit "$prompts" \
    --json "$out/${n}_$arm.json" > "$out/${n}_$arm.txt" 2>&1 || echo "arm $arm failed (see $out/${n}_$arm.txt)"
  grep -E "^(http|local) " "$out/${n}_$arm.txt" || true
  kill -INT "$pid"; wait "$pid" || true
}
n=0
for _ in $(seq 1 "$pairs"); do
  for arm in libgomp worker worker libgomp; do n=$((n + 1)); echo "== run $n arm $arm"; run_arm "$n" "$arm"; done
done
