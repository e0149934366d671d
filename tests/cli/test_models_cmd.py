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

    def test_converted_model_is_not_reloaded(self, tmp_path, capsys, monkeypatch):
        """A model whose converted cache exists (and passes its checks) is reported present
        without loading it."""
        from common import integrity
        from common.modeling import loader
        model = PACKAGED["qwen2.5-coder-0.5b"]
        (tmp_path / model.filename).write_bytes(b"gguf")
        digest = "ab" * 32  # stands for the verified file's SHA256 (the real check is in test_integrity)
        monkeypatch.setattr(integrity, "model_digest", lambda name, path: digest)
        monkeypatch.setattr(loader, "converted_problem", lambda conv, sha: None)
        loader._cache_dir_for(tmp_path / model.filename, digest, "bfloat16").mkdir(parents=True)
        monkeypatch.setattr(loader, "load_weights", lambda *a: (_ for _ in ()).throw(AssertionError("loaded")))
        assert models_cmd.convert([model], tmp_path, "bfloat16") == 0
        assert "converted cache present" in capsys.readouterr().out
