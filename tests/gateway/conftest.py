"""Shared helpers for gateway tests: an app with a fake backend, run via aiohttp's test
client. ``real_backend`` is the hook for integration runs against a live scheduler."""

from __future__ import annotations

import asyncio
import os

import pytest
from aiohttp.test_utils import TestClient, TestServer

from common.config import Config
from services.gateway.app import make_app
from tests.gateway.fakes import ByteTokenizer, FakeBackend


def make_test_app(backend: FakeBackend | None = None, tokenizer=None, **cfg):
    config = Config(**{"max_model_len": 64, **cfg})
    return make_app(config, backend or FakeBackend(), tokenizer or ByteTokenizer(), replica="t")


def serve(app, scenario):
    """Run ``await scenario(client)`` against ``app`` on a loopback test server."""
    async def main():
        async with TestClient(TestServer(app, handler_cancellation=True)) as client:
            return await scenario(client)
    return asyncio.run(main())


@pytest.fixture
def real_backend():
    """Integration hook: a ZmqBackend to a running scheduler at $TREESPEC_TEST_SCHEDULER."""
    address = os.environ.get("TREESPEC_TEST_SCHEDULER")
    if not address:
        pytest.skip("set TREESPEC_TEST_SCHEDULER to a running scheduler address")
    from services.gateway.backend import ZmqBackend
    return ZmqBackend(address, replica="test")
