#!/usr/bin/env bash
# Create the secrets compose.yaml mounts, in $TREESPEC_SECRETS_DIR (default ./secrets):
#   api_keys.json   the gateway's API keys (one key, named $KEY_NAME, printed once below)
#   curve/          CURVE keypairs of the scheduler and of each role (kept here, mounted nowhere)
#   curve-<service>/  what each service mounts (common/control_keys.py bundle_files): the
#                   scheduler its pair + every role's public key; gateway, draft and verifier
#                   their own pair + the scheduler's public key
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
  python -c "
from common.control_keys import ensure_curve_keys, write_bundle
ensure_curve_keys(\"/secrets/curve\")
for service in (\"scheduler\", \"gateway\", \"draft\", \"verifier\"):
    write_bundle(\"/secrets/curve\", service, f\"/secrets/curve-{service}\")
"
  chown -R 10001:10001 /secrets/api_keys.json /secrets/curve /secrets/curve-*
  chmod 0600 /secrets/api_keys.json
'
echo "secrets in $dir: $(cd "$dir" && ls -d api_keys.json curve curve-* | tr '\n' ' ')"
