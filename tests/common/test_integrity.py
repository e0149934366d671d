"""Weights integrity: stamps, pinned digests, and the digest-bound converted cache."""

from __future__ import annotations

import json
import logging
import os
import shutil

import pytest

from common import integrity
from common.models import PACKAGED, PackagedModel


class TestStamps:
    def test_stamp_written_then_trusted(self, tmp_path):
        """file_digest hashes once and records (size, mtime, inode, sha256); an unchanged file is not re-hashed."""
        f = tmp_path / "m.gguf"
        f.write_bytes(b"weights" * 100)
        digest = integrity.file_digest(f)
        stamp = integrity.read_stamp(f)
        assert stamp is not None and stamp.sha256 == digest == integrity.sha256_file(f) and stamp.matches(f)
        forged = integrity.Stamp(stamp.size, stamp.mtime_ns, stamp.inode, "0" * 64)  # proves the stamp is read
        integrity.stamp_path(f).write_text(json.dumps(forged.__dict__))
        assert integrity.file_digest(f) == "0" * 64

    def test_changed_file_is_rehashed(self, tmp_path):
        """A file whose bytes changed (same size, new mtime) is re-hashed and its stamp rewritten."""
        f = tmp_path / "m.gguf"
        f.write_bytes(b"a" * 64)
        first = integrity.file_digest(f)
        f.write_bytes(b"b" * 64)
        os.utime(f, ns=(1, 2))
        assert integrity.file_digest(f) == integrity.sha256_file(f) != first
        assert integrity.read_stamp(f).mtime_ns == 2

    def test_packaged_model_must_match_pin(self, tmp_path, monkeypatch):
        """A file under a packaged name whose digest is not the pinned one raises IntegrityError."""
        f = tmp_path / "fake.gguf"
        f.write_bytes(b"planted")
        monkeypatch.setitem(PACKAGED, "fake", PackagedModel("fake", "fake.gguf", (), ".gguf", "1" * 64, 7))
        with pytest.raises(integrity.IntegrityError, match="pinned"):
            integrity.model_digest("fake", f)
        monkeypatch.setitem(PACKAGED, "fake", PackagedModel("fake", "fake.gguf", (), ".gguf",
                                                            integrity.sha256_file(f), 7))
        assert integrity.model_digest("fake", f) == integrity.sha256_file(f)

    def test_every_part_has_a_wheel_hash(self):
        """Every packaged model pins one wheel SHA256 per part, written as a pip --require-hashes file."""
        for m in PACKAGED.values():
            lines = m.requirements().splitlines()
            assert len(lines) == len(m.parts) == len(m.wheel_sha256)
            assert all(" --hash=sha256:" in ln and len(ln.rsplit(":", 1)[1]) == 64 for ln in lines)


def _tiny_hf_model(root, layers: int, seed: int = 0):
    """A tiny Qwen2 model + word-level tokenizer saved as a transformers directory."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    vocab = {f"t{i}": i for i in range(63)} | {"[UNK]": 63}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    torch.manual_seed(seed)
    Qwen2ForCausalLM(cfg).save_pretrained(root)
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]").save_pretrained(root)
    return root


class TestConvertedCache:
    def test_planted_converted_cache_is_refused(self, tmp_path, caplog):
        """A converted cache replaced by a planted 2-layer model (no manifest, or a copied manifest) is
        refused: the model loads with its own 3 layers and the cache is rebuilt from the source."""
        from common.modeling.loader import MANIFEST, load_weights
        model = _tiny_hf_model(tmp_path / "model", layers=3)
        spec, _, _ = load_weights(str(model), "float32")
        (conv,) = [d for d in (tmp_path / ".converted").iterdir() if d.name != "stamps"]
        manifest = json.loads((conv / MANIFEST).read_text())
        assert spec.num_layers == 3 and manifest["spec"]["num_layers"] == 3
        planted = tmp_path / "planted"
        load_weights(str(_tiny_hf_model(planted / "model", layers=2, seed=1)), "float32")
        (fake,) = [d for d in (planted / ".converted").iterdir() if d.name != "stamps"]
        for keep_manifest in (False, True):
            shutil.rmtree(conv)
            shutil.copytree(fake, conv)
            if keep_manifest:  # the real manifest copied over the planted weights
                (conv / MANIFEST).write_text(json.dumps(manifest))
            else:
                (conv / MANIFEST).unlink()
            with caplog.at_level(logging.WARNING):
                spec, weights, _ = load_weights(str(model), "float32")
            assert spec.num_layers == 3 and "layers.2.qkv.weight" in weights
            assert "refusing converted cache" in caplog.text
            assert json.loads((conv / MANIFEST).read_text())["spec"]["num_layers"] == 3

    def test_replaced_conversion_prunes_only_its_own_stale_caches(self, tmp_path):
        """Converting a model deletes its own older caches (same stem and dtype, another key, e.g. the
        mtime-keyed ones of an older treespec) and keeps other models', other dtypes' and tokenizer caches."""
        from common.modeling.loader import load_weights
        model = _tiny_hf_model(tmp_path / "model", layers=2)
        load_weights(str(model), "float32")
        root = tmp_path / ".converted"
        (conv,) = [d for d in root.iterdir() if d.name != "stamps"]
        stem, size = "model", conv.name.split("-")[1]
        stale = [root / f"{stem}-{size}-1796080005-float32", root / f"{stem}-999-sha{'a' * 32}-float32"]
        kept = [root / f"{stem}-{size}-sha{'b' * 32}-bfloat16", root / f"{stem}-2-{size}-sha{'c' * 32}-float32",
                root / f"{stem}x-{size}-123-float32", root / f"{stem}-{size}-tokenizer"]
        conv.rename(stale[0])
        for d in stale[1:] + kept:
            d.mkdir()
        load_weights(str(model), "float32")  # converts again (its cache is gone) and prunes
        left = {d.name for d in root.iterdir()}
        assert conv.name in left and not any(d.name in left for d in stale)
        assert all(d.name in left for d in kept)
