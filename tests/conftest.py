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
