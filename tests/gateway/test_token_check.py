"""Token-id fields out of the vocabulary are a 400 naming the field, before the backend."""

from __future__ import annotations

import pytest

from services.gateway.openai_api import ApiError, CompletionRequest
from services.gateway.token_check import check_token_fields
from tests.gateway.conftest import make_test_app, serve
from tests.gateway.fakes import FakeBackend

POISON = {"prompt": "x", "max_tokens": 5, "min_tokens": 1, "stop_token_ids": [1000000000]}


class TestCheckTokenFields:
    @pytest.mark.parametrize("ids", [[1000000000], [1000], [3, 5000]])
    def test_out_of_vocab_stop_ids_rejected(self, ids):
        """Any stop_token_ids entry at or past the vocabulary size raises ApiError(400,
        param='stop_token_ids'); negative and over-32-bit ids are already refused by request
        parsing (tests/gateway/test_protocol_edges.py)."""
        req = CompletionRequest(prompt="x", stop_token_ids=ids)
        with pytest.raises(ApiError) as err:
            check_token_fields(req, vocab_size=1000)
        assert err.value.status == 400 and err.value.param == "stop_token_ids"

    def test_in_vocab_ids_pass(self):
        """Ids at both ends of the vocabulary are accepted."""
        check_token_fields(CompletionRequest(prompt="x", stop_token_ids=[0, 999]), vocab_size=1000)


class TestPoisonRequest:
    def test_poison_request_is_400_and_never_submitted(self):
        """The issue's poison request gets 400 naming stop_token_ids and never reaches the scheduler."""
        backend = FakeBackend()

        async def scenario(client):
            r = await client.post("/v1/completions", json=POISON)
            return r.status, await r.json()
        status, body = serve(make_test_app(backend), scenario)
        assert status == 400 and body["error"]["param"] == "stop_token_ids"
        assert "1000000000" in body["error"]["message"]
        assert not backend.submits
