#!/usr/bin/env bash
# Seeded sampling across deployments (issue 13): starts `make up`'s command (`treespec up`) three
# times, with --tree-size 0 (plain decoding), 4 and auto, and runs scripts/seed_check.py against
# each (one seeded request alone, then 4 identical ones concurrently; temperatures 0.8 and 1.5).
# Every text must be identical across all deployments. Prints one JSON line per run and a verdict.
#   bash scripts/seed_matrix.sh            (SEED_PORT=18450; about 10 minutes on 2 CPU cores)
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${SEED_PORT:-18450}
BIN=${BIN:-.venv/bin}
out=$(mktemp -d /tmp/seed-matrix.XXXXXX)
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, commit $(git rev-parse --short HEAD)"
for ts in 0 4 auto; do
  log=$out/up-$ts.log
  "$BIN/treespec" up --port "$PORT" --tree-size "$ts" >"$log" 2>&1 &
  pid=$!
  until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do
    kill -0 $pid 2>/dev/null || { echo "treespec up --tree-size $ts exited:"; tail -20 "$log"; exit 1; }
    sleep 2
  done
  for t in 0.8 1.5; do
    "$BIN/python" scripts/seed_check.py --base-url "http://127.0.0.1:$PORT/v1" --label "tree_size=$ts temperature=$t" \
      --temperature "$t" | tee -a "$out/results.jsonl"
  done
  kill -INT $pid; wait $pid || true
done
"$BIN/python" - "$out/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for t in ("0.8", "1.5"):
    texts = {x for r in rows if r["label"].endswith(t) for x in [r["alone"], *r["concurrent"]]}
    print(f"temperature {t}: {len(texts)} distinct text(s) over {3 * 5} requests -> "
          + ("REPRODUCIBLE" if len(texts) == 1 else "DIFFERENT"))
PY
