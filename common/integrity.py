"""Weights integrity: SHA256 stamps of model files, checked at every load. Torch-free.

``treespec models fetch`` / ``verify`` hash a model file and write a *stamp* (size,
mtime_ns, inode, SHA256) to ``<model dir>/.converted/stamps/<file>.json``. A worker
loading the model reads the stamp: when size, mtime and inode still match it trusts the
recorded digest, otherwise it re-hashes the file (and rewrites the stamp). A packaged
model whose digest differs from the pinned one is refused. The converted-weights cache
is keyed by the digest and carries a manifest (``source.json``) that binds it to the
source digest and to its own weights' digest (see ``common/modeling/loader.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from common.models import PACKAGED

CHUNK = 8 * 1024 * 1024  # bytes per read while hashing


class IntegrityError(ValueError):
    """A model file (or its converted cache) does not match its recorded or pinned digest."""


@dataclass(frozen=True)
class Stamp:
    size: int  # bytes
    mtime_ns: int
    inode: int
    sha256: str  # hex

    @classmethod
    def of(cls, path: Path, sha256: str) -> "Stamp":
        st = path.stat()
        return cls(st.st_size, st.st_mtime_ns, st.st_ino, sha256)

    def matches(self, path: Path) -> bool:
        st = path.stat()
        return (self.size, self.mtime_ns, self.inode) == (st.st_size, st.st_mtime_ns, st.st_ino)


def sha256_file(path: Path) -> str:
    """Hex SHA256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def stamp_path(path: Path) -> Path:
    return path.parent / ".converted" / "stamps" / f"{path.name}.json"


def read_stamp(path: Path) -> Stamp | None:
    try:
        return Stamp(**json.loads(stamp_path(path).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def write_stamp(path: Path, sha256: str) -> None:
    """Record ``sha256`` for ``path`` (atomic); a read-only model directory is tolerated."""
    target = stamp_path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".stamp-")
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(Stamp.of(path, sha256)), f)
        os.replace(tmp, target)
    except OSError:
        pass


def file_digest(path: Path) -> str:
    """SHA256 of ``path``, from its stamp when size/mtime/inode match, else re-hashed."""
    stamp = read_stamp(path)
    if stamp is not None and stamp.matches(path):
        return stamp.sha256
    digest = sha256_file(path)
    write_stamp(path, digest)
    return digest


def model_digest(name_or_path: str, path: Path) -> str:
    """SHA256 identifying a model: of the file, or over a directory's files (relative
    name + digest, sorted). Raises IntegrityError when a packaged model's file does not
    match its pinned digest."""
    if path.is_dir():
        h = hashlib.sha256()
        for f in sorted(p for p in path.rglob("*") if p.is_file() and ".converted" not in p.parts):
            h.update(f"{f.relative_to(path)}\0{sha256_file(f)}\n".encode())
        return h.hexdigest()
    digest = file_digest(path)
    pinned = PACKAGED[name_or_path].sha256 if name_or_path in PACKAGED else None
    if pinned is not None and digest != pinned:
        raise IntegrityError(f"model {name_or_path!r} at {path} has SHA256 {digest}, not the pinned {pinned}; "
                             "run `treespec models fetch` to restore it")
    return digest
