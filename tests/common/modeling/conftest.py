"""Fixtures of the modeling tests."""

import pytest


@pytest.fixture
def exact_calls(monkeypatch):
    """A list that gets the arguments of every ``ExactAttention`` a ``DecoderModel.forward`` builds (one per
    pass routed to treespec's C++ attention kernel); the kernel still runs."""
    import common.modeling.model as model_module
    calls = []
    real = model_module.ExactAttention
    monkeypatch.setattr(model_module, "ExactAttention", lambda *a: calls.append(a) or real(*a))
    return calls
