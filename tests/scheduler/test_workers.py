"""Worker registry: cache-aware placement on the worker that holds a request's prefix."""

from common import wire
from common.config import Config
from common.prefix_hash import block_keys
from services.scheduler.core import SchedulerCore
from services.scheduler.rounds import RoundDriver
from services.scheduler.workers import WorkerRegistry

SYSTEM = list(range(1000, 1100))  # 6 full blocks of 16
A, B = b"\x01verifier-a", b"\x02verifier-b"


class NullLog:
    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def _registry() -> WorkerRegistry:
    reg = WorkerRegistry(1e9)
    for ident in (A, B):
        reg.hello(ident, wire.Hello(role=wire.Role.VERIFIER, replica=ident.decode()[-1], pid=1, slots_total=4,
                                             max_len=256), 0.0)
    return reg


class TestCacheAwarePick:
    def test_prefers_worker_holding_prefix(self):
        """A request sharing a prefix placed on worker b goes to b; without keys the least
        loaded (then lowest key) worker a is chosen."""
        reg = _registry()
        reg.of_identity(B).prefix.add(block_keys(SYSTEM, 16))
        keys = block_keys(SYSTEM + [1, 2, 3], 16)
        assert reg.pick(wire.Role.VERIFIER, keys).identity == B
        assert reg.pick(wire.Role.VERIFIER).identity == A

    def test_load_comes_first(self):
        """When the worker holding the prefix is much busier (2 of 4 slots vs 0) the least loaded wins."""
        reg = _registry()
        b = reg.of_identity(B)
        b.prefix.add(block_keys(SYSTEM, 16))
        b.seqs |= {"x", "y"}
        assert reg.pick(wire.Role.VERIFIER, block_keys(SYSTEM, 16)).identity == A

    def test_restart_forgets(self):
        """A worker that says hello again (restarted, cold cache) has an empty index."""
        reg = _registry()
        reg.of_identity(B).prefix.add(block_keys(SYSTEM, 16))
        reg.hello(B, wire.Hello(role=wire.Role.VERIFIER, replica="b", pid=3, slots_total=4, max_len=256), 1.0)
        assert reg.pick(wire.Role.VERIFIER, block_keys(SYSTEM, 16)).identity == A

    def test_heartbeat_bounds_index(self):
        """A heartbeat reporting a 2-block pool shrinks the index to 2 blocks."""
        reg = _registry()
        reg.of_identity(B).prefix.add(block_keys(SYSTEM, 16))
        reg.heartbeat(B, wire.Heartbeat(role=wire.Role.VERIFIER, replica="b", slots_total=4,
                                         prefix_cache_blocks_total=2), 1.0)
        assert len(reg.of_identity(B).prefix) == 2


class TestDriverRecordsPlacement:
    def test_follow_up_goes_where_prefix_was_freed(self):
        """After a sequence finishes on worker b (its prompt + output retained there), a second
        turn extending it is placed on b, not on the idle lower-keyed a; with prefix_cache off it is not."""
        for on, expected in ((True, B), (False, A)):
            reg = _registry()
            driver = RoundDriver(SchedulerCore(4, 16, 4096, {0}), reg, Config(prefix_cache=on), NullLog(), 1e9)
            reg.of_identity(A).seqs.add("busy")  # turn 1 lands on b
            turn1 = driver.core.submit(wire.Submit(request_id="t1", prompt=SYSTEM,
                                                       params=wire.SamplingParams(max_tokens=8)))
            assert driver.placer.place(turn1, wire.Role.VERIFIER).identity == B
            turn1.output = list(range(20))
            turn1.placement(wire.Role.VERIFIER).accepted(len(SYSTEM) + 19)
            driver._release(turn1)
            reg.of_identity(A).seqs.clear()
            turn2 = driver.core.submit(wire.Submit(request_id="t2", prompt=SYSTEM + list(range(20)) + [5, 6],
                                                       params=wire.SamplingParams()))
            assert driver.placer.place(turn2, wire.Role.VERIFIER).identity == expected




class TestWorkerRegistryHeartbeat:
    def test_unknown_worker_heartbeat_registers_nothing(self):
        """A heartbeat from a worker the registry does not know (dropped, or met by an earlier
        scheduler) registers nothing: only Hello does."""
        reg = WorkerRegistry(5.0)
        assert reg.heartbeat(b"w", wire.Heartbeat(role=wire.Role.VERIFIER, replica="0", ready=True, slots_used=0, slots_total=8), 1.0) is None
        assert reg.all() == []
        reg.hello(b"w", wire.Hello(role=wire.Role.VERIFIER, replica="0", pid=1, slots_total=8), 2.0)
        assert reg.heartbeat(b"w", wire.Heartbeat(role=wire.Role.VERIFIER, replica="0", ready=True, slots_used=3, slots_total=8), 3.0).last_seen == 3.0
