"""Print pyproject's runtime requirements for an image, one per line, for ``pip install -r``.

    python docker/requirements.py --drop torch triton > req.txt       # GPU image: keep base torch
    python docker/requirements.py --slim > req.txt                    # gateway + scheduler

``--slim`` drops everything that pulls in torch or is only used by the model code, and
adds the torch-free tokenizer stack the gateway uses instead (tokenizers + jinja2).
"""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path

SLIM_DROP = ("torch", "triton", "transformers", "accelerate", "safetensors", "gguf", "matplotlib")
SLIM_ADD = ("tokenizers>=0.20", "jinja2>=3.1")


def requirement_name(req: str) -> str:
    """The distribution name of a requirement string ("torch==2.13.0" -> "torch")."""
    return re.split(r"[\s\[<>=!~;]", req.strip(), maxsplit=1)[0].lower()


def requirements(pyproject: Path, drop: tuple[str, ...], add: tuple[str, ...] = ()) -> list[str]:
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return [d for d in deps if requirement_name(d) not in drop] + list(add)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pyproject", default=str(Path(__file__).resolve().parent.parent / "pyproject.toml"))
    parser.add_argument("--drop", nargs="*", default=[])
    parser.add_argument("--slim", action="store_true")
    args = parser.parse_args()
    drop = tuple(d.lower() for d in args.drop) + (SLIM_DROP if args.slim else ())
    print("\n".join(requirements(Path(args.pyproject), drop, SLIM_ADD if args.slim else ())))


if __name__ == "__main__":
    main()
