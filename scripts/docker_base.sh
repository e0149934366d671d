#!/usr/bin/env bash
# Make sure a Dockerfile's base image exists locally; when no registry can be reached and the
# image is missing, build a stand-in from Debian packages and tag it with the base's name.
#
#   bash scripts/docker_base.sh python:3.11-slim-bookworm
#
# The stand-in: `debootstrap --variant=minbase bookworm` + python3 3.11 and its headers (as
# in the official python:3.11-slim-bookworm image) in a venv at /usr/local/venv whose bin/
# is first on PATH, so `python` and `pip` behave as in the official image. Only for
# machines without a registry (the smoke test here); elsewhere `docker pull` gets the real
# image first.
set -euo pipefail

tag=${1:?usage: docker_base.sh IMAGE:TAG}
suite=${DEBIAN_SUITE:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "base image $tag: present"
  exit 0
fi
if timeout 120 docker pull -q "$tag" >/dev/null 2>&1; then
  echo "base image $tag: pulled"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap missing: apt-get install -y debootstrap" >&2; exit 1; }

root=$(mktemp -d /tmp/treespec-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "base image $tag: not pullable, building a Debian $suite stand-in in $root"
debootstrap --variant=minbase --include=python3,python3-venv,python3-dev,ca-certificates \
  "$suite" "$root" "$mirror" >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
rm -f "$root.log"
chroot "$root" python3 -m venv /usr/local/venv
chroot "$root" apt-get clean
# Trust what this host trusts (a machine behind a TLS-intercepting proxy reaches PyPI only
# with its CA bundle); pip in the venv reads PIP_CERT, other clients SSL_CERT_FILE.
bundle=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
[ -f "$bundle" ] && cp "$bundle" "$root/etc/ssl/certs/ca-certificates.crt"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/usr/share/doc/* "$root"/usr/share/man/*
tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
  --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
  --change 'CMD ["python3"]' \
  --message "treespec stand-in for $tag (debootstrap $suite + python3-venv)" - "$tag"
docker run --rm "$tag" python -c "import sys, venv; print('stand-in', '$tag', sys.version.split()[0])"
