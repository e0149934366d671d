#!/usr/bin/env bash
# End-to-end smoke test of the Docker Compose deployment on a machine WITHOUT a GPU
# (`make compose-smoke`; not part of `make test`). Needs a Docker engine and Compose v2.
#
# Builds the slim and CPU worker images, creates the secrets, runs the models job (fetch +
# verify + convert into the `models` volume), starts scheduler + gateway + draft + verifier
# with compose.cpu.yaml, then: a streamed chat completion and a completion (greedy), /health
# and /metrics; the same streamed chat again while a draft container is SIGKILLed
# mid-stream (the text must be identical); `--scale draft=2` (two draft replica series in
# /metrics); a draft crashing inside its container (restart policy restarts it, it rejoins);
# `down -v`. Prints the time of every step.
#
# Environment: SMOKE_PORT (gateway host port, 18200), SMOKE_PROJECT (treespec-smoke),
# SMOKE_MAX_TOKENS (64), SMOKE_TREE_SIZE (16), SMOKE_DTYPE (float32), SMOKE_SEED_CACHE (a directory of already fetched *.gguf files to
# copy into the volume instead of downloading; default ~/.cache/treespec/models if present,
# "none" to download), TORCH_INDEX_URL (see compose.cpu.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."

export COMPOSE_PROJECT_NAME=${SMOKE_PROJECT:-treespec-smoke}
export COMPOSE_FILE=compose.yaml:compose.cpu.yaml
export TREESPEC_GATEWAY_PORT=${SMOKE_PORT:-18200}
export TREESPEC_BIND_ADDRESS=127.0.0.1
# A fixed tree size skips the workers' start-up cost calibration (tree_size = auto), which
# takes minutes on a small, shared CPU; greedy output does not depend on it.
export TREESPEC_TREE_SIZE=${SMOKE_TREE_SIZE:-16}
# float32: greedy text is then identical token for token whether a round verified a draft tree
# or (draft killed) decoded plainly; in bfloat16 the two round differently and a near-tie can
# flip (BENCHMARKS.md, "greedy divergences"). SMOKE_DTYPE=bfloat16 runs the default dtype.
export TREESPEC_DTYPE=${SMOKE_DTYPE:-float32}
MAX_TOKENS=${SMOKE_MAX_TOKENS:-64}
URL=http://127.0.0.1:$TREESPEC_GATEWAY_PORT
PROMPT="Write a Python function that returns the n-th Fibonacci number iteratively."
PY=${PYTHON:-python3}
SEED=${SMOKE_SEED_CACHE:-$HOME/.cache/treespec/models}
work=$(mktemp -d /tmp/treespec-smoke.XXXXXX)
export TREESPEC_SECRETS_DIR=$work/secrets
T0=$EPOCHREALTIME
step_t=$T0

elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
step() {  # step NAME: print the time since the start and start timing a new step
  echo "[smoke +$(elapsed "$T0")s] $*"
  step_t=$EPOCHREALTIME
}
took() { echo "[smoke +$(elapsed "$T0")s]   took $(elapsed "$step_t")s: $*"; }
fail() { echo "[smoke] FAIL: $*" >&2; docker compose ps -a >&2 || true; docker compose logs --tail 40 >&2 || true; exit 1; }
cleanup() {
  local rc=$?
  step "down -v (exit status so far: $rc)"
  docker compose down -v --remove-orphans >/dev/null 2>&1 || true
  docker run --rm -v "$work:/w" --user 0 "${TREESPEC_IMAGE_SLIM:-treespec-slim:latest}" rm -rf /w/secrets >/dev/null 2>&1 || true
  rm -rf "$work"
  took "stack removed"
  exit $rc
}
trap cleanup EXIT

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...: poll every 2 s
  local limit=$1 what=$2; shift 2
  local until=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$until" ] || fail "timed out after ${limit}s waiting for $what"
    sleep 2
  done
}
draft_series() {  # number of draft replicas with treespec:service_up 1 in /metrics
  "$PY" scripts/smoke_client.py get "$URL/metrics" --grep 'service_up{' | grep -c 'service="draft"' || true
}
two_drafts() { [ "$(draft_series)" -ge 2 ]; }

step "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(docker version --format 'engine {{.Server.Version}}'); $(docker compose version)"
shares=/sys/fs/cgroup/cpu/docker/cpu.shares  # cgroup v1: all containers together weigh this much
[ -r "$shares" ] && echo "docker containers' cgroup cpu.shares: $(cat "$shares") (a host process weighs 1024)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

step "base image"
bash scripts/docker_base.sh python:3.11-slim-bookworm
took "base image ready"

step "CPU torch wheel"
pin=$(sed -n 's/^ARG TORCH_VERSION=//p' docker/Dockerfile.cpu)
if [ -z "${TORCH_INDEX_URL+x}" ] && "$PY" -m pip download -q --no-deps "torch==$pin+cpu" -d docker/wheels 2>/dev/null; then
  export TORCH_INDEX_URL=  # the wheel pip finds here (docker/wheels/), no PyTorch index needed
  echo "using $(ls docker/wheels/torch-*.whl)"
else
  echo "torch from ${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}"
fi
took "wheel source chosen"

step "build images (slim: gateway + scheduler; cpu: draft + verifier + models job)"
docker compose build --progress plain scheduler draft 2>&1 | grep -E '^#[0-9]+ (DONE|CACHED|\[)|ERROR|torch ' || true
docker image inspect treespec-slim:latest treespec-cpu:latest --format '{{index .RepoTags 0}} {{.Size}} bytes' \
  || fail "image build failed"
took "images built"

step "secrets (API key + CURVE keys) in $TREESPEC_SECRETS_DIR"
out=$(bash scripts/compose_secrets.sh) || fail "compose_secrets.sh: $out"
KEY=$(echo "$out" | sed -n 's/^api key: //p')
[ -n "$KEY" ] || fail "no API key created: $out"
echo "$out" | sed 's/^api key: \(tsk-....\).*/api key: \1… (made for this run, deleted at the end)/'
took "secrets created"

step "models job (fetch + verify + convert into the models volume)"
if [ "$SEED" != none ] && ls "$SEED"/qwen2.5-coder-*.gguf >/dev/null 2>&1; then
  echo "seeding the volume from $SEED (the job still verifies digests and converts)"
  docker compose run --rm --no-deps -v "$SEED:/seed:ro" --entrypoint sh models \
    -c 'cp -p /seed/qwen2.5-coder-*.gguf /data/models/ && ls -l /data/models'
fi
docker compose up models --exit-code-from models 2>&1 | sed 's/^/  /'
took "models volume ready"

step "docker compose up -d (scheduler, gateway, draft, verifier)"
docker compose up -d --no-build 2>&1 | sed 's/^/  /'
wait_for 900 "gateway /health = 200" "$PY" scripts/smoke_client.py get "$URL/health"
took "stack healthy"
docker compose ps --format 'table {{.Service}}\t{{.Name}}\t{{.Status}}'

step "GET /health"
"$PY" scripts/smoke_client.py get "$URL/health"

step "streamed chat completion (greedy, max_tokens=$MAX_TOKENS)"
ref=$("$PY" scripts/smoke_client.py chat "$URL" "$KEY" "$PROMPT" "$MAX_TOKENS") || fail "chat: $ref"
echo "$ref"
took "chat done"

step "completion (greedy, max_tokens=$MAX_TOKENS)"
out=$("$PY" scripts/smoke_client.py completion "$URL" "$KEY" "def fibonacci(n):" "$MAX_TOKENS") || fail "completion: $out"
echo "$out"
took "completion done"

step "GET /metrics (treespec:service_up and requests)"
"$PY" scripts/smoke_client.py get "$URL/metrics" --grep 'service_up{' || fail "/metrics"
"$PY" scripts/smoke_client.py get "$URL/metrics" --grep 'requests' | grep -v '^#' | head -8

step "same chat again, SIGKILL the draft container after 3 streamed chunks"
draft_ctr=$(docker compose ps -q draft | head -1)
rm -f "$work/notify"
"$PY" scripts/smoke_client.py chat "$URL" "$KEY" "$PROMPT" "$MAX_TOKENS" --notify "$work/notify" --after 3 \
  > "$work/killed.json" &
client=$!
wait_for 300 "3 streamed chunks" test -e "$work/notify"
echo "docker kill -s KILL $(docker kill -s KILL "$draft_ctr") (mid-stream)"
wait "$client" || fail "stream after kill: $(cat "$work/killed.json")"
cat "$work/killed.json"
"$PY" - "$ref" "$(cat "$work/killed.json")" <<'PYEOF' || fail "text differs after the draft was killed"
import json, sys
a, b = (json.loads(x) for x in sys.argv[1:3])
print("identical text:", a["text"] == b["text"], f"({len(a['text'])} chars)")
sys.exit(a["text"] != b["text"])
PYEOF
took "kill survived"
echo "draft container after the kill: $(docker inspect -f '{{.State.Status}} exit={{.State.ExitCode}} restarts={{.RestartCount}}' "$draft_ctr")"
echo "(Docker counts \`docker kill\` as a manual stop, so restart: unless-stopped leaves it down; the"
echo " verifier alone finished the stream. \`up --scale\` below starts it again next to a new replica.)"

step "docker compose up -d --scale draft=2"
docker compose up -d --no-build --no-recreate --scale draft=2 2>&1 | sed 's/^/  /'
wait_for 600 "two draft replica series in /metrics" two_drafts
"$PY" scripts/smoke_client.py get "$URL/metrics" --grep 'service_up{'
docker compose ps --format '{{.Service}} {{.Name}}' draft | while read -r _ name; do
  echo "  $name hostname=$(docker inspect -f '{{.Config.Hostname}}' "$name")"
done
took "scaled to two drafts"

step "crash a draft from inside (kill -KILL -1 as its user): the restart policy brings it back"
crashed=$(docker compose ps --format '{{.Name}}' draft | sort | tail -1)
restarts=$(docker inspect -f '{{.RestartCount}}' "$crashed")
docker exec "$crashed" sh -c 'kill -KILL -1' >/dev/null 2>&1 || true  # takes the exec'd shell too
restarted() { [ "$(docker inspect -f '{{.RestartCount}}' "$crashed")" -gt "$restarts" ]; }
one_draft() { [ "$(draft_series)" -le 1 ]; }
wait_for 120 "$crashed to be restarted" restarted
echo "$crashed: $(docker inspect -f '{{.State.Status}} restarts={{.RestartCount}}' "$crashed") (was $restarts)"
wait_for 120 "the scheduler to drop the crashed replica" one_draft
wait_for 600 "the restarted replica back in /metrics" two_drafts
"$PY" scripts/smoke_client.py get "$URL/metrics" --grep 'service_up{' | grep 'service="draft"'
took "crashed draft restarted and rejoined"

step "chat with two drafts"
out=$("$PY" scripts/smoke_client.py chat "$URL" "$KEY" "$PROMPT" "$MAX_TOKENS") || fail "chat: $out"
echo "$out"
"$PY" - "$ref" "$out" <<'PYEOF' || fail "text differs with two drafts"
import json, sys
a, b = (json.loads(x) for x in sys.argv[1:3])
print("identical text:", a["text"] == b["text"])
sys.exit(a["text"] != b["text"])
PYEOF
took "chat done"

step "PASS (total $(elapsed "$T0")s)"
