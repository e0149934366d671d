"""API keys: ``treespec keys add [--name N] | list | revoke NAME``.

The keys file (config ``api_keys_file``) is JSON: ``{"keys": [{"name", "sha256",
"created"}]}`` and holds only SHA-256 digests; a new key is printed once by ``add`` and
never stored. Writes are atomic (temp file + rename) and the file is made owner-only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from common.cli_args import config_or_report

KEY_PREFIX = "tsk-"
KEY_BYTES = 32
FILE_MODE = 0o600


@dataclass(frozen=True)
class KeyRecord:
    name: str
    sha256: str  # hex digest of the key
    created: float  # unix time


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def load_keys(path: str | Path) -> list[KeyRecord]:
    """Records of a keys file ([] when missing); raises ValueError when it is malformed."""
    p = Path(path)
    if not p.exists():
        return []
    try:
        return [KeyRecord(**k) for k in json.loads(p.read_text())["keys"]]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"malformed API keys file {p}: {exc}") from exc


def save_keys(path: str | Path, records: list[KeyRecord]) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".keys-")
    with os.fdopen(fd, "w") as f:
        json.dump({"keys": [asdict(r) for r in records]}, f, indent=1)
    os.chmod(tmp, FILE_MODE)
    os.replace(tmp, p)


def add_key(path: str | Path, name: str | None = None) -> str:
    """Create a key, store its digest under ``name`` and return the key (shown once)."""
    records = load_keys(path)
    name = name or f"key-{len(records) + 1}"
    if any(r.name == name for r in records):
        raise ValueError(f"a key named {name!r} already exists")
    key = KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)
    save_keys(path, records + [KeyRecord(name, digest(key), time.time())])
    return key


def revoke_key(path: str | Path, name: str) -> bool:
    """Remove the key ``name``; False when there is none."""
    records = load_keys(path)
    kept = [r for r in records if r.name != name]
    save_keys(path, kept)
    return len(kept) != len(records)


def _file_args(parser: argparse.ArgumentParser, action: bool) -> None:
    """Where the keys file is: ``--keys-file``, else ``api_keys_file`` from ``--config`` / ``--set`` /
    ``TREESPEC_API_KEYS_FILE``. Accepted before and after the action (``treespec keys add --keys-file F``);
    on an action's parser they default to nothing, so they do not undo the same flag given before it."""
    unset = {"default": argparse.SUPPRESS} if action else {}
    parser.add_argument("--keys-file", help="keys file (default: config api_keys_file)", **unset)
    parser.add_argument("--config", help="TOML config file (read for api_keys_file)", **unset)
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="a config key, e.g. api_keys_file=PATH",
                        **(unset or {"default": []}))


def configure(parser: argparse.ArgumentParser) -> None:
    _file_args(parser, action=False)
    sub = parser.add_subparsers(dest="action", required=True)
    add = sub.add_parser("add", help="create a key and print it once")
    add.add_argument("--name", help="a label for the key")
    listing = sub.add_parser("list", help="list key names (never the keys)")
    rev = sub.add_parser("revoke", help="delete a key")
    rev.add_argument("name")
    for action in (add, listing, rev):
        _file_args(action, action=True)


def run(args: argparse.Namespace) -> int:
    if args.keys_file:
        path = args.keys_file
    else:
        cfg = config_or_report(args, "keys")
        if cfg is None:
            return 2
        path = cfg.api_keys_file
    if not path:
        print("treespec keys: no keys file: pass --keys-file PATH or set api_keys_file in the config", file=sys.stderr)
        return 2
    try:
        return _dispatch(args, path)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _dispatch(args: argparse.Namespace, path: str) -> int:
    if args.action == "add":
        print(add_key(path, args.name))
    elif args.action == "list":
        for r in load_keys(path):
            print(f"{r.name}\t{time.strftime('%Y-%m-%d %H:%M', time.gmtime(r.created))}\tsha256:{r.sha256[:12]}")
    elif not revoke_key(path, args.name):
        print(f"no key named {args.name!r}", file=sys.stderr)
        return 1
    return 0
