"""Build the verifier worker: main model (or a tensor-parallel group), sized KV pool."""

from __future__ import annotations

import os
from dataclasses import dataclass

from common import wire
from common.config import Config
from common.modeling.budget import plan_slots
from common.modeling.build import TREE_HEADROOM, eos_ids, main_model
from common.tree import TokenTree
from services.verifier.runner import VerifierRunner

WARMUP_TOKENS = [0, 1, 2, 3]
WARMUP_ID = "__warmup__"


@dataclass
class VerifierWorker:
    runner: VerifierRunner
    hello: wire.Hello

    def slots_used(self) -> int:
        return self.runner.cache.slots_used


def build_verifier(cfg: Config, replica: str, log) -> VerifierWorker:
    """Load the main model, size its KV pool, warm it up with one tiny step.

    Raises NotImplementedError for ``tensor_parallel_size`` > 1 until
    ``services/verifier/tensor_parallel.py`` provides ``build_worker(cfg, replica, log)`` (returning an object with ``runner``, ``hello``, ``slots_used()``);
    FileNotFoundError / ValueError (model), MemoryBudgetError (KV budget).
    """
    if cfg.tensor_parallel_size > 1:
        return _build_tensor_parallel(cfg, replica, log)
    model, tok = main_model(cfg)
    slots, max_len = plan_slots(cfg, model, TREE_HEADROOM)
    runner = VerifierRunner(model, slots, max_len)
    _warm_up(runner)
    log.info("main model ready", model=cfg.main_model_path, slots=slots, max_len=max_len)
    hello = wire.Hello(wire.Role.VERIFIER, replica, os.getpid(), slots, max_len, sorted(eos_ids(tok)))
    return VerifierWorker(runner, hello)


def _warm_up(runner) -> None:
    empty = wire.tree_to_wire(TokenTree.empty())
    seq = wire.VerifySeq(WARMUP_ID, 0, WARMUP_TOKENS, empty, wire.SamplingParams())
    runner.step(wire.VerifyStep(0, [seq]))
    runner.free([WARMUP_ID])


def _build_tensor_parallel(cfg: Config, replica: str, log) -> VerifierWorker:
    """Hook for the tensor-parallel verifier (rank 0 serves ZeroMQ, others follow)."""
    try:
        from services.verifier import tensor_parallel
    except ImportError as exc:
        raise NotImplementedError(
            f"tensor_parallel_size={cfg.tensor_parallel_size} needs services/verifier/tensor_parallel.py "
            "(not available yet); set tensor_parallel_size = 1") from exc
    return tensor_parallel.build_worker(cfg, replica, log)
