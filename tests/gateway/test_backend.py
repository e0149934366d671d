"""ZmqBackend against an in-test ROUTER standing in for the scheduler."""

from __future__ import annotations

import asyncio

import pytest
import zmq
import zmq.asyncio

from common import wire
from services.gateway.backend import BackendRejected, BackendUnavailable, ZmqBackend

PARAMS = wire.SamplingParams(max_tokens=3)


async def recv(router) -> tuple[bytes, wire.Message]:
    ident, frame = await router.recv_multipart()
    return ident, wire.decode(frame)


async def with_router(scenario):
    ctx = zmq.asyncio.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    backend = ZmqBackend(f"tcp://127.0.0.1:{port}", replica="g", heartbeat_interval_s=0.1, silence_timeout_s=0.5)
    await backend.start()
    try:
        return await scenario(router, backend)
    finally:
        await backend.close()
        router.close(linger=0)
        ctx.term()


async def say_stats(router, ident, ready=True, epoch="e1"):
    stats = wire.Stats(running=0, waiting=0, num_drafts=0, num_draft_tokens=0, num_accepted_tokens=0,
                       accepted_per_pos=[], tree_size=0, workers=[], ready=ready, epoch=epoch)
    await router.send_multipart([ident, wire.encode(stats)])


class TestZmqBackend:
    def test_hello_submit_and_deltas(self):
        """Hello first; Submit gets the request's deltas until finish; Stats sets ready."""
        async def scenario(router, backend):
            ident, hello = await recv(router)
            assert isinstance(hello, wire.Hello) and hello.role is wire.Role.GATEWAY
            await say_stats(router, ident)
            gen = backend.generate("r1", [1, 2], PARAMS)
            first = asyncio.ensure_future(anext(gen))
            while True:
                _, msg = await recv(router)
                if isinstance(msg, wire.Submit):
                    break
            for _ in range(100):  # the Stats frame and the Submit cross: wait for it to land
                if backend.ready:
                    break
                await asyncio.sleep(0.01)
            assert msg.prompt == [1, 2] and backend.ready
            await router.send_multipart([ident, wire.encode(wire.TokenDelta(request_id="r1", tokens=[5, 6]))])
            await router.send_multipart([ident, wire.encode(wire.TokenDelta(request_id="r1", tokens=[7],
                                                                            finish=wire.FinishReason.LENGTH))])
            got = [await first] + [d async for d in gen]
            return [d.tokens for d in got]
        assert asyncio.run(with_router(scenario)) == [[5, 6], [7]]

    def test_rejected_raises(self):
        """A Rejected reply raises BackendRejected with its status."""
        async def scenario(router, backend):
            ident, _ = await recv(router)
            gen = backend.generate("r1", [1], PARAMS)
            nxt = asyncio.ensure_future(anext(gen))
            await asyncio.sleep(0.05)
            await router.send_multipart([ident, wire.encode(wire.Rejected(request_id="r1", status=429, reason="full"))])
            with pytest.raises(BackendRejected) as exc:
                await nxt
            return exc.value.status
        assert asyncio.run(with_router(scenario)) == 429

    def test_silent_scheduler_fails_requests(self):
        """With no frames from the scheduler for the timeout, a waiting request raises."""
        async def scenario(router, backend):
            ident, _ = await recv(router)
            await say_stats(router, ident)
            with pytest.raises(BackendUnavailable):
                async for _ in backend.generate("r1", [1], PARAMS):
                    pass
            return backend.ready
        assert asyncio.run(with_router(scenario)) is False

    def test_new_scheduler_epoch_fails_in_flight_requests_at_once(self):
        """Stats with a new epoch (the scheduler restarted) end a waiting request with
        BackendUnavailable at once, although the scheduler is not silent."""
        async def scenario(router, backend):
            ident, _ = await recv(router)
            await say_stats(router, ident, epoch="first")
            gen = backend.generate("r1", [1], PARAMS)
            nxt = asyncio.ensure_future(anext(gen))
            await asyncio.sleep(0.05)
            await router.send_multipart([ident, wire.encode(wire.TokenDelta(request_id="r1", tokens=[5]))])
            assert (await nxt).tokens == [5]
            await say_stats(router, ident, epoch="second")
            with pytest.raises(BackendUnavailable, match="restarted"):  # not the silence path's message
                await anext(gen)
            return backend.connected
        assert asyncio.run(with_router(scenario)) is True
