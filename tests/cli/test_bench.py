"""``treespec bench`` (in process): command-line errors come back as one line and an exit status."""

from __future__ import annotations

import subprocess
import sys


def test_missing_model_path_is_a_cli_error_not_a_traceback(tmp_path):
    """A --model-path that does not exist: exit 2, a message naming the path, no traceback, no JSON."""
    prompts = tmp_path / "p.txt"
    prompts.write_text("hi\n")
    out = tmp_path / "x.json"
    done = subprocess.run([sys.executable, "-m", "treespec.cli", "bench", "--model-path", str(tmp_path / "nope"),
                           "--dataset", str(prompts), "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "cannot load the models" in done.stderr and "nope" in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()
