"""Model loading: tiny random models and the draft/main vocabulary check."""

import pytest

from common.modeling.loader import (VocabularyMismatchError, check_same_vocabulary, load_weights,
                                   load_weights_tokenizer_only)


class _Tok:
    """A stand-in tokenizer exposing only get_vocab()."""

    def __init__(self, vocab):
        self._vocab = vocab

    def get_vocab(self):
        return dict(self._vocab)


class TestCheckSameVocabulary:
    def test_same_vocabulary(self):
        """Identical token maps pass; differing embedding rows only produce a note."""
        a = _Tok({"a": 0, "b": 1})
        assert check_same_vocabulary(a, _Tok({"b": 1, "a": 0}), 2, 2) is None
        assert "padding" in check_same_vocabulary(a, a, 8, 2)

    def test_mismatch_names_both(self):
        """A differing token map raises VocabularyMismatchError with both sizes and the count of moved tokens."""
        with pytest.raises(VocabularyMismatchError, match=r"draft tokenizer \(3 tokens.*main model's \(2 tokens.*: 3 draft tokens map to other ids"):
            check_same_vocabulary(_Tok({"a": 0, "b": 1}), _Tok({"a": 1, "b": 0, "c": 2}), 2, 3)

    @pytest.mark.real
    def test_smollm2_draft_refused(self):
        """SmolLM2's tokenizer is refused as a draft for Qwen2.5-Coder, naming both tokenizers."""
        qwen = load_weights_tokenizer_only("qwen2.5-coder-0.5b")
        spec, _, smol = load_weights("smollm2-135m")
        with pytest.raises(VocabularyMismatchError) as e:
            check_same_vocabulary(qwen, smol, 151936, spec.vocab_size)
        msg = str(e.value)
        assert f"({len(smol.get_vocab())} tokens, {type(smol).__name__})" in msg
        assert f"({len(qwen.get_vocab())} tokens, {type(qwen).__name__})" in msg


class TestTinyModels:
    def test_seeded_and_shaped(self, tiny_main, tiny_other_draft):
        """tiny-random:<seed> is deterministic per seed, different across seeds, with the Qwen vocabulary size."""
        from common.modeling.tiny import TINY_VOCAB, parse, tiny_spec, tiny_weights
        assert parse("tiny-random:0") == (0, 4.0) and parse("tiny-random:3:1.5") == (3, 1.5)
        again = tiny_weights(tiny_spec(), 0, scale=4.0)
        assert tiny_main.spec.vocab_size == TINY_VOCAB == 151936
        assert tiny_main.w["embed"].shape == (TINY_VOCAB, tiny_main.spec.hidden_size)
        assert (again["lm_head"] == tiny_main.w["lm_head"]).all()
        assert not (tiny_other_draft.w["lm_head"] == tiny_main.w["lm_head"]).all()

    def test_bad_dtype_and_path(self):
        """An unknown dtype or malformed tiny path raises ValueError; a missing model FileNotFoundError."""
        with pytest.raises(ValueError, match="dtype"):
            load_weights("tiny-random:0", "int3")
        with pytest.raises(ValueError, match="tiny-random"):
            load_weights("tiny-random:x", "float32")
        with pytest.raises(FileNotFoundError):
            load_weights("/nonexistent/model.gguf", "float32")


class TestHFDirectory:
    def test_hf_directory_matches_transformers_logits(self, tmp_path):
        """A saved Hugging Face Qwen2 directory loads into the lean decoder with the same logits as transformers."""
        import numpy as np
        import torch
        from transformers import Qwen2Config, Qwen2ForCausalLM

        from common.modeling.attention import build_batch
        from common.modeling.loader import load_model

        torch.manual_seed(0)
        cfg = Qwen2Config(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
        hf = Qwen2ForCausalLM(cfg).eval()
        hf.save_pretrained(tmp_path)
        model, _ = load_model(str(tmp_path), "float32")
        ids = [3, 17, 42, 99, 5, 250]
        cache = model.new_cache(1, 64)
        slot = cache.allocate()
        tok, pos, mask = build_batch([0], [ids], [np.zeros(0, np.int64)], [np.zeros(0, np.int32)])
        ours = model.logits(model.forward(tok, pos, cache, [slot], mask)[0])
        with torch.no_grad():
            ref = hf(torch.tensor([ids])).logits[0]
        assert torch.allclose(ours, ref, atol=1e-4), (ours - ref).abs().max()
