"""The slim image's requirement set, installed alone in a fresh venv, runs the gateway and scheduler.

This is the slim Docker image without Docker: exactly ``docker/requirements.py --slim`` plus
the package itself (``--no-deps``), nothing from the test environment. pip's cache makes
reruns fast; a cold run downloads ~60 MB of wheels.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PIP_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def slim_venv(tmp_path_factory) -> Path:
    """A venv (no system site packages) holding only the slim requirement set and treespec."""
    root = tmp_path_factory.mktemp("slim")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    reqs = subprocess.run([sys.executable, str(REPO / "docker" / "requirements.py"), "--slim"],
                          capture_output=True, text=True, check=True).stdout
    (root / "requirements.txt").write_text(reqs)
    src = root / "src"  # a copy: building in the checkout would leave build/ and *.egg-info there
    for name in ("common", "services", "treespec"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", src)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    for args in (["-r", str(root / "requirements.txt")], ["--no-deps", str(src)]):
        out = subprocess.run([*pip, *args], capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        assert out.returncode == 0, out.stderr[-3000:]
    shutil.rmtree(src)
    return venv


def run(venv: Path, *argv: str) -> subprocess.CompletedProcess:
    """Run a venv executable from outside the checkout (so imports come from the venv)."""
    return subprocess.run([str(venv / "bin" / argv[0]), *argv[1:]], capture_output=True, text=True,
                          cwd=venv.parent, timeout=120)


class TestSlimVenv:
    def test_no_torch(self, slim_venv):
        """The slim set does not install torch (nor transformers)."""
        out = run(slim_venv, "python", "-c", "import importlib.util as u; print(u.find_spec('torch'), "
                                             "u.find_spec('transformers'))")
        assert out.stdout.split() == ["None", "None"], out.stderr

    @pytest.mark.parametrize("command", ["gateway", "scheduler", "keys", "logs", "compose-gpus"])
    def test_commands_start(self, slim_venv, command):
        """`treespec <command> --help` (which imports the command's module) exits 0."""
        out = run(slim_venv, "treespec", command, "--help")
        assert out.returncode == 0 and out.stdout.startswith("usage: treespec"), out.stderr[-2000:]

    def test_cli_help(self, slim_venv):
        """`treespec --help`, the image's default command, imports every subcommand and exits 0."""
        out = run(slim_venv, "treespec", "--help")
        assert out.returncode == 0 and "gateway" in out.stdout, out.stderr[-2000:]

    def test_every_service_module_imports(self, slim_venv):
        """docker/check_slim.py imports every gateway/scheduler/common module without torch."""
        out = run(slim_venv, "python", str(REPO / "docker" / "check_slim.py"))
        assert out.returncode == 0, out.stderr[-3000:]
        assert "slim modules import without torch" in out.stdout

    def test_pip_check(self, slim_venv):
        """Every installed dependency's own requirements are met (only treespec's dropped ones are not)."""
        out = run(slim_venv, "python", "-m", "pip", "check")
        problems = [line for line in out.stdout.splitlines() if not line.startswith("treespec ")]
        assert not problems, out.stdout + out.stderr
        assert "torch" in out.stdout  # treespec's full list does need torch: the check really ran
