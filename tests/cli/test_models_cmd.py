"""treespec models convert: the models job's conversion step (compose, Kubernetes)."""

from __future__ import annotations

from common.models import PACKAGED
from treespec import models_cmd
from treespec.cli import build_parser


class TestConvert:
    def test_parser_accepts_convert(self):
        """`treespec models convert --dtype float16 --only M` parses."""
        args = build_parser("models").parse_args(
            ["models", "convert", "--dtype", "float16", "--only", "qwen2.5-coder-0.5b"])
        assert (args.action, args.dtype, args.only) == ("convert", "float16", ["qwen2.5-coder-0.5b"])

    def test_missing_model_is_reported(self, tmp_path, capsys):
        """Converting a model that was not fetched exits 1 naming it, and writes nothing."""
        rc = models_cmd.convert([PACKAGED["qwen2.5-coder-0.5b"]], tmp_path, "bfloat16")
        assert rc == 1
        assert "qwen2.5-coder-0.5b" in capsys.readouterr().err
        assert list(tmp_path.iterdir()) == []

    def test_bad_dtype_is_reported(self, tmp_path, capsys):
        """An unknown dtype exits 1 with the loader's message."""
        assert models_cmd.convert([PACKAGED["qwen2.5-coder-0.5b"]], tmp_path, "int3") == 1
        assert "unknown dtype 'int3'" in capsys.readouterr().err
