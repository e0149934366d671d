#!/usr/bin/env bash
# Create the secrets compose.yaml mounts, in $TREESPEC_SECRETS_DIR (default ./secrets):
#   api_keys.json   the gateway's API keys (one key, named $KEY_NAME, printed once below)
#   curve/          CURVE keypairs of the scheduler and its clients (control-plane encryption)
# Runs `treespec` inside the slim image, so nothing needs installing on the host; the files
# are owned by uid 10001, the images' user, and the secret ones are mode 0600.
# Existing files are kept. More keys later:
#   docker run --rm --user 0 -v "$PWD/secrets:/s" treespec-slim treespec keys --keys-file /s/api_keys.json add
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${TREESPEC_SECRETS_DIR:-./secrets}
image=${TREESPEC_IMAGE_SLIM:-treespec-slim:latest}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
docker image inspect "$image" >/dev/null 2>&1 || docker compose build scheduler
docker run --rm --user 0 -e KEY_NAME="${KEY_NAME:-default}" -v "$dir:/secrets" "$image" sh -ec '
  if [ ! -e /secrets/api_keys.json ]; then
    echo "api key: $(treespec keys --keys-file /secrets/api_keys.json add --name "$KEY_NAME")"
  fi
  python -c "from common.transport import ensure_curve_keys; ensure_curve_keys(\"/secrets/curve\")"
  chown -R 10001:10001 /secrets/api_keys.json /secrets/curve
  chmod 0600 /secrets/api_keys.json
'
echo "secrets in $dir: $(cd "$dir" && ls -d api_keys.json curve/* | tr '\n' ' ')"
