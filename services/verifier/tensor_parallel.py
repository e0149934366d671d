"""Tensor-parallel verifier: W ranks each hold 1/W of every layer, rank 0 faces the world.

Sharding is Megatron-LM's (Shoeybi et al. 2019, §3) as gpt-fast's ``tp.py`` applies it to
an unchanged model: the fused QKV and gate/up projections are split column-wise (each
rank keeps its own query heads, KV heads and intermediate rows), ``o`` and ``down``
row-wise (input columns), and ``DecoderModel._reduce`` all-reduces their partial sums.
Embedding, norms and LM head are replicated.

Processes: the caller's process is rank 0; ranks 1..W-1 are spawned
(``torch.multiprocessing``, spawn context) and run the same :class:`VerifierRunner` on
their shard. For every call rank 0 broadcasts the message (``common.wire.encode`` bytes
as a uint8 tensor, length first; length 0 = shut down), then all ranks run it in
lock-step; only rank 0's result is returned. gloo on CPU, NCCL on CUDA (rank r on
``cuda:r``). Workers exit when told to or when their parent process disappears.

Grammar-constrained requests: every rank masks its tree rows with the same
``GrammarMasks`` as the single verifier (the logits are all-reduced, so identical on every
rank), so all ranks accept, and commit KV for, the same path.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from common import wire
from common.modeling.build import eos_ids
from common.modeling.grammar import GrammarMasks
from common.modeling.loader import DTYPES, load_weights
from common.modeling.model import DecoderModel, ModelSpec
from common.modeling.quant import Int4Weight, Int8Weight
from services.verifier.runner import VerifierRunner

log = logging.getLogger(__name__)

STARTUP_TIMEOUT = timedelta(minutes=10)  # connect + load weights on every rank
IDLE_TIMEOUT = timedelta(days=365)  # workers wait in a broadcast between requests
JOIN_TIMEOUT_S = 30.0
PARENT_POLL_S = 1.0
LOCALHOST = "127.0.0.1"


def shard_weights(weights: dict[str, torch.Tensor], spec: ModelSpec, rank: int, world: int) -> dict[str, torch.Tensor]:
    """This rank's slice of a treespec weights dict (see ``loader.convert_state_dict``).

    ``qkv`` ``[(heads + 2 * kv_heads) * D, H]`` (and bias): query heads, KV heads sliced
    separately and re-fused; ``gate_up`` ``[2I, H]``: gate rows and up rows each sliced;
    ``o`` ``[H, heads * D]`` and ``down`` ``[H, I]``: input columns sliced. Raises
    ValueError when heads, KV heads or the intermediate size do not divide by ``world``,
    or when weights are quantized.
    """
    for name, n in (("num_heads", spec.num_heads), ("num_kv_heads", spec.num_kv_heads),
                    ("intermediate_size", spec.intermediate_size)):
        if n % world:
            raise ValueError(f"tensor_parallel_size {world} does not divide {name}={n}")
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} outside world size {world}")
    return {name: _shard_one(name, w, spec, rank, world) for name, w in weights.items()}


def _shard_one(name: str, w, spec: ModelSpec, rank: int, world: int) -> torch.Tensor:
    if isinstance(w, (Int4Weight, Int8Weight)):
        raise ValueError(f"{name}: quantized weights cannot be sharded")
    if name.endswith((".qkv.weight", ".qkv.bias")):
        d = spec.head_dim
        parts = w.split([spec.num_heads * d, spec.num_kv_heads * d, spec.num_kv_heads * d])
        return torch.cat([p.chunk(world)[rank] for p in parts]).contiguous()
    if name.endswith(".gate_up.weight"):
        return torch.cat([p.chunk(world)[rank] for p in w.chunk(2)]).contiguous()
    if name.endswith((".o.weight", ".down.weight")):
        return w.chunk(world, dim=1)[rank].contiguous()
    return w  # embed, lm_head, norms: replicated


GrammarFactory = Callable[[int], "GrammarMasks | None"]  # vocab size -> masks (picklable: a module-level function)


def grammar_masks(tok, vocab_size: int, factory: GrammarFactory | None = None) -> GrammarMasks | None:
    """The verifier's grammar masks: ``factory(vocab_size)`` when given, else from the model's
    tokenizer (converted on the first constrained request); None without a tokenizer."""
    return factory(vocab_size) if factory is not None else GrammarMasks.from_hf(tok, vocab_size, eos_ids(tok))


def build_shard_runner(model_path: str, dtype: str, slots: int, max_len: int, rank: int, world: int,
                       device: str, group, grammar: GrammarFactory | None = None) -> VerifierRunner:
    """Load the model, keep this rank's shard on ``device``, wrap it in a VerifierRunner
    that masks constrained requests like the single verifier."""
    spec, weights, tok = load_weights(model_path, dtype)
    shard = {k: v.to(device) for k, v in shard_weights(weights, spec, rank, world).items()}
    del weights
    model = DecoderModel(spec, shard, DTYPES[dtype], device, group=group)
    return VerifierRunner(model, slots, max_len, grammar_masks(tok, spec.vocab_size, grammar))


def rank_device(device: str, rank: int) -> str:
    """The device of tensor-parallel rank ``rank``: ``cuda:<rank>`` on CUDA, else ``cpu``."""
    return f"cuda:{rank}" if device.startswith("cuda") else "cpu"


def _init_rank(rank: int, world: int, port: int, device: str):
    """Join the default group (startup timeout) and return a long-timeout group for serving."""
    backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"tcp://{LOCALHOST}:{port}", rank=rank,
                            world_size=world, timeout=STARTUP_TIMEOUT)
    return dist.new_group(list(range(world)), timeout=IDLE_TIMEOUT)


def _broadcast_bytes(payload: bytes | None, device: str, group) -> bytes:
    """Rank 0 passes ``payload``, the others None; every rank returns the payload bytes."""
    n = torch.tensor([len(payload) if payload is not None else 0], dtype=torch.int64, device=device)
    dist.broadcast(n, 0, group=group)
    if int(n) == 0:
        return b""
    if payload is not None:
        buf = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(device)
    else:
        buf = torch.empty(int(n), dtype=torch.uint8, device=device)
    dist.broadcast(buf, 0, group=group)
    return payload if payload is not None else buf.cpu().numpy().tobytes()


def _exit_with_parent(parent_pid: int) -> None:
    """Daemon thread: end this worker if its parent process is gone (no orphans)."""
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(1)
    threading.Thread(target=watch, daemon=True, name="tp-parent-watch").start()


def _worker(rank: int, world: int, port: int, device: str, model_path: str, dtype: str, slots: int,
            max_len: int, parent_pid: int, grammar: GrammarFactory | None) -> None:
    """Rank 1..W-1: mirror every message rank 0 broadcasts until the empty (stop) message."""
    _exit_with_parent(parent_pid)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dev = rank_device(device, rank)
    group = _init_rank(rank, world, port, device)
    runner = build_shard_runner(model_path, dtype, slots, max_len, rank, world, dev, group, grammar)
    dist.barrier()
    while payload := _broadcast_bytes(None, dev, group):
        msg = wire.decode(payload)
        if isinstance(msg, wire.VerifyStep):
            runner.step(msg)
        elif isinstance(msg, wire.Free):
            runner.free(msg.seq_ids)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOCALHOST, 0))
        return s.getsockname()[1]


class TensorParallelVerifier:
    """Same interface as :class:`VerifierRunner` (``step``, ``free``, ``cache``), over W ranks.

    Raises ValueError for ``tp_size < 2``, more CUDA ranks than GPUs, a second instance
    in one process (torch.distributed's default group is per process), or a model whose
    heads / KV heads / intermediate size do not divide by ``tp_size``. ``grammar``: builds
    each rank's grammar masks (default: from the model's tokenizer).
    """

    def __init__(self, model_path: str, dtype: str, slots: int, max_len: int, tp_size: int,
                 device: str = "cpu", grammar: GrammarFactory | None = None) -> None:
        if tp_size < 2:
            raise ValueError(f"TensorParallelVerifier needs tp_size >= 2, got {tp_size}")
        if dist.is_initialized():
            raise ValueError("a process can host one TensorParallelVerifier (torch.distributed is in use)")
        if device.startswith("cuda") and tp_size > torch.cuda.device_count():
            raise ValueError(f"tp_size {tp_size} > {torch.cuda.device_count()} visible GPUs")
        self.tp_size, self._closed = tp_size, False
        self._device = rank_device(device, 0)
        port, ctx = _free_port(), mp.get_context("spawn")
        self._procs = [ctx.Process(target=_worker, daemon=True, name=f"tp-rank-{r}",
                                   args=(r, tp_size, port, device, model_path, dtype, slots, max_len, os.getpid(),
                                         grammar))
                       for r in range(1, tp_size)]
        for p in self._procs:
            p.start()
        try:
            self._group = _init_rank(0, tp_size, port, device)
            self.runner = build_shard_runner(model_path, dtype, slots, max_len, 0, tp_size, self._device,
                                             self._group, grammar)
            dist.barrier()
        except BaseException:
            self.close()
            raise
        atexit.register(self.close)

    @property
    def cache(self):
        """Rank 0's KV cache (every rank holds the same lengths and slots)."""
        return self.runner.cache

    @property
    def slots_used(self) -> int:
        return self.runner.cache.slots_used

    @property
    def slots_total(self) -> int:
        return self.runner.cache.num_slots

    @property
    def worker_pids(self) -> list[int]:
        return [p.pid for p in self._procs if p.pid is not None]

    def step(self, msg: wire.VerifyStep) -> wire.VerifyResult:
        """Broadcast the step to all ranks, run it, return rank 0's result."""
        _broadcast_bytes(wire.encode(msg), self._device, self._group)
        return self.runner.step(msg)

    def held(self) -> list[str]:
        """Sequence ids holding a KV slot (rank 0's table; every rank holds the same)."""
        return self.runner.held()

    def free(self, seq_ids: list[str], keep: bool = True) -> None:
        """Release sequences on every rank (tensor-parallel runs have no prefix cache: ``keep``
        is accepted for the runner interface and has no effect)."""
        _broadcast_bytes(wire.encode(wire.Free(seq_ids=list(seq_ids))), self._device, self._group)
        self.runner.free(seq_ids)

    def close(self) -> None:
        """Stop the workers (stop message, join, then terminate) and leave the group."""
        if self._closed:
            return
        self._closed = True
        if dist.is_initialized():
            try:
                if hasattr(self, "runner"):
                    _broadcast_bytes(b"", self._device, self._group)
            except RuntimeError as exc:  # a worker died: terminate below
                log.warning("tensor-parallel stop broadcast failed: %s", exc)
        for p in self._procs:
            p.join(JOIN_TIMEOUT_S if hasattr(self, "runner") else 0)
            if p.is_alive():
                p.kill()
                p.join()
        if dist.is_initialized():
            dist.destroy_process_group()

    def __enter__(self) -> "TensorParallelVerifier":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def build_verifier(model_path: str, dtype: str, slots: int, max_len: int, tp_size: int = 1,
                   device: str = "cpu", grammar: GrammarFactory | None = None):
    """A :class:`VerifierRunner` (tp_size 1) or a :class:`TensorParallelVerifier`, both with
    grammar masks for constrained requests."""
    if tp_size < 1:
        raise ValueError(f"tensor_parallel_size must be >= 1, got {tp_size}")
    if tp_size > 1:
        return TensorParallelVerifier(model_path, dtype, slots, max_len, tp_size, device, grammar)
    spec, weights, tok = load_weights(model_path, dtype)
    model = DecoderModel(spec, {k: v.to(device) for k, v in weights.items()}, DTYPES[dtype], device)
    return VerifierRunner(model, slots, max_len, grammar_masks(tok, spec.vocab_size, grammar))


__all__ = ["TensorParallelVerifier", "build_verifier", "shard_weights"]
