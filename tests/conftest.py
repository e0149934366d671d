"""Shared fixtures: session-scoped tiny random models (2 layers, real Qwen vocabulary size)."""

import pytest

MAIN = "tiny-random:0"
OTHER_DRAFT = "tiny-random:1"
NOISE_STD = 0.05  # relative noise on the main model's layer weights: a partially agreeing draft


@pytest.fixture(scope="session")
def tiny_main():
    """The main model: tiny-random:0 in fp32."""
    from common.modeling.loader import load_model
    return load_model(MAIN, "float32")[0]


@pytest.fixture(scope="session")
def tiny_other_draft():
    """An unrelated draft: tiny-random:1 in fp32 (almost never agrees with the main model)."""
    from common.modeling.loader import load_model
    return load_model(OTHER_DRAFT, "float32")[0]


@pytest.fixture(scope="session")
def tiny_noisy_draft():
    """A draft that agrees with the main model only part of the time: the main weights with
    seeded relative noise on the transformer layers, so that trees get partially accepted."""
    import torch

    from common.modeling.loader import load_weights
    from common.modeling.model import DecoderModel
    spec, weights, _ = load_weights(MAIN, "float32")
    g = torch.Generator().manual_seed(123)
    noisy = {k: v + NOISE_STD * v.std() * torch.randn(v.shape, generator=g) if k.startswith("layers.") and v.dim() == 2 else v
             for k, v in weights.items()}
    return DecoderModel(spec, noisy, torch.float32)


@pytest.fixture
def greedy_spec_equals_plain():
    """``check(main, draft, tok, tree_size, depth)``: on 3 HumanEval prompts the first 32 greedy
    tokens of speculation (trees of ``tree_size`` nodes, ``depth`` levels) through the in-process
    engine equal plain decoding token for token (assert); returns tokens committed per round."""
    import gzip
    import json
    from pathlib import Path

    from common import wire
    from common.config import Config
    from services.draft.runner import DraftRunner
    from services.scheduler.core import SchedulerCore
    from services.scheduler.local import LocalEngine
    from services.verifier.runner import VerifierRunner

    def check(main, draft, tok, tree_size: int, depth: int) -> float:
        data = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "humaneval" / "HumanEval.jsonl.gz"
        with gzip.open(data, "rt") as f:
            prompts = [tok.encode(json.loads(line)["prompt"]) for line, _ in zip(f, range(3))]
        params = wire.SamplingParams(max_tokens=32, ignore_eos=True)

        def engine(size):
            cfg = Config(tree_size=size, max_accept_length=depth, max_model_len=2048)
            return LocalEngine(cfg, SchedulerCore(1, 4, 2048, {tok.eos_token_id}), VerifierRunner(main, 1, 1024),
                               DraftRunner(draft, 1, 1024) if size else None)

        plain_eng, spec_eng = engine(0), engine(tree_size)
        committed = []
        for i, prompt in enumerate(prompts):
            ref = plain_eng.timed_generate(f"p{i}", prompt, params)[0]
            out, _, c = spec_eng.timed_generate(f"s{i}", prompt, params)
            assert out == ref, (i, tok.decode(out), tok.decode(ref))
            committed += c
        return sum(committed) / len(committed)
    return check
