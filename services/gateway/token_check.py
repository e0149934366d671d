"""Range checks of the token-id fields of an OpenAI request (vocabulary bounds). Torch-free.

Kept apart from request parsing (``openai_api.py``) so that either can change alone: a
token id outside ``0..vocab_size-1`` is a 400 naming the field, never a backend failure.
"""

from __future__ import annotations

from services.gateway.openai_api import ApiError

TOKEN_ID_FIELDS = ("stop_token_ids",)  # list[int] fields of both routes holding token ids


def check_token_fields(req, vocab_size: int) -> None:
    """Raise ApiError(400, param=<field>) when a token-id field holds an id outside the
    vocabulary ``0..vocab_size-1``."""
    for name in TOKEN_ID_FIELDS:
        ids = getattr(req, name, None) or []
        bad = next((t for t in ids if not 0 <= t < vocab_size), None)
        if bad is not None:
            raise ApiError(400, f"{name} holds token id {bad}; token ids must be in 0..{vocab_size - 1}",
                           param=name)
