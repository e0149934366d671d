#!/usr/bin/env bash
# The multi-process service over HTTP: plain decoding, speculation, and draft/verify overlap
# on shared and on separate CPU cores. Each run starts a fresh deployment on port 8000,
# waits for /health, runs `treespec bench --url` (8 HumanEval prompts, concurrency 1,2,4,8,
# 128 tokens), saves /metrics, and stops it. About 6 minutes per run on 2 cores.
#
#   bash benchmarks/service_http.sh [RUN...]     RUN: ab plain spec overlap pinned-off pinned-on
#
# ab: ONE deployment (tree_size auto); at each concurrency level the bench sends the requests
# once with "speculation": false (plain decoding) and once speculative, interleaved
# (`treespec bench --url --baseline plain`). This is the fair comparison on a host whose speed
# drifts: plain and spec deployments run one after the other (plain, spec) see different hosts.
# The prefix cache is off in this run: with it, whichever mode goes first pays the prompts' prefill.
#
# LEVELS (default 1,2,4,8) sets the concurrency levels; REPEAT (default 1) runs each level that many
# times per mode, pooled (`treespec bench --repeat`; in `ab`, mirrored: plain, spec, spec, plain).
#
# Results: $OUT/<run>.json (+ <run>.metrics.txt), OUT default benchmarks/results/service. Needs port 8000 free.
set -euo pipefail
cd "$(dirname "$0")/.."
T=.venv/bin/treespec
OUT=${OUT:-benchmarks/results/service}
mkdir -p "$OUT"
RUNS=${*:-ab plain spec overlap pinned-off pinned-on}

wait_ready() { for _ in $(seq 1 300); do curl -sf localhost:8000/health > /dev/null && return 0; sleep 2; done; return 1; }

bench() {  # bench RUN [BENCH FLAGS...]
  local run=$1; shift
  $T bench --url http://localhost:8000 --concurrency "${LEVELS:-1,2,4,8}" --repeat "${REPEAT:-1}" \
    --dataset humaneval --limit 8 --max-new-tokens 128 --json "$OUT/$run.json" "$@"
  curl -s localhost:8000/metrics | grep -v '^#' | grep -E 'overlap|mean_accepted|spec_decode_num_(drafts|accepted_tokens)_total ' \
    > "$OUT/$run.metrics.txt"
}

up() {  # up RUN BENCH_FLAGS FLAGS...: treespec up (every process shares both cores)
  local run=$1 bflags=$2; shift 2
  local logs; logs=$(mktemp -d)
  $T up --set log_dir="$logs" "$@" > "$logs/up.out" 2>&1 &
  local pid=$!
  wait_ready && bench "$run" $bflags
  kill -INT $pid; wait $pid || true
}

pinned() {  # pinned RUN OVERLAP: verifier on core 0, draft on core 1, one thread each
  local run=$1 logs; logs=$(mktemp -d)
  export TREESPEC_OVERLAP=$2 TREESPEC_LOG_DIR=$logs
  $T scheduler > "$logs/scheduler.out" 2>&1 & local s=$!
  taskset -c 0 env OMP_NUM_THREADS=1 $T verifier --replica 0 > "$logs/verifier.out" 2>&1 & local v=$!
  for _ in $(seq 1 200); do grep -q "main model ready" "$logs/verifier.out" && break; sleep 2; done
  taskset -c 1 env OMP_NUM_THREADS=1 $T draft --replica 0 > "$logs/draft.out" 2>&1 & local d=$!
  $T gateway > "$logs/gateway.out" 2>&1 & local g=$!
  wait_ready && bench "$run"
  kill -TERM $g $d $v $s; wait $g $d $v $s || true
  unset TREESPEC_OVERLAP TREESPEC_LOG_DIR
}

for run in $RUNS; do
  echo "== $run"
  case $run in
    ab) up ab "--baseline plain" --set overlap=off --set prefix_cache=false ;;
    plain) up plain "" --tree-size 0 ;;
    spec) up spec "" --set overlap=off ;;
    overlap) up overlap "" --set overlap=on ;;
    pinned-off) pinned pinned-off off ;;
    pinned-on) pinned pinned-on on ;;
    *) echo "unknown run $run" >&2; exit 2 ;;
  esac
  sleep 3
done
