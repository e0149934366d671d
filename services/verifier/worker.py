"""Build the verifier worker: main model (or a tensor-parallel group), sized KV pool."""

from __future__ import annotations

import os
from dataclasses import dataclass

from common import wire
from common.config import AUTO, Config
from common.modeling.budget import plan_prefix_blocks, plan_slots
from common.modeling.devices import device_ids
from common.modeling.build import eos_ids, main_model
from common.modeling.runner import measure_forward_ms
from common.tree_budget import TreeBudget
from common.tree import TokenTree
from common.modeling.grammar import GrammarMasks
from services.verifier.runner import VerifierRunner
from services.worker import WARMUP_ID, WARMUP_TOKENS, prefix_stats


@dataclass
class VerifierWorker:
    runner: VerifierRunner
    hello: wire.Hello

    def slots_used(self) -> int:
        inner = getattr(self.runner, "runner", self.runner)  # TensorParallelVerifier wraps rank 0's
        return inner.cache.slots_used

    def prefix_stats(self) -> tuple[int, int, int, int]:
        inner = getattr(self.runner, "runner", self.runner)
        return prefix_stats(inner.table.prefix)

    @property
    def kernel_plan(self):
        """The main model's kernel_probe.KernelPlan (None for a tensor-parallel group)."""
        return getattr(getattr(self.runner, "model", None), "kernel_plan", None)

    @property
    def attention_plan(self):
        """The main model's attention_probe.AttentionPlan (None: not measured, or a tensor-parallel group)."""
        return getattr(getattr(self.runner, "model", None), "attention_plan", None)


def build_verifier(cfg: Config, replica: str, log) -> VerifierWorker:
    """Load the main model, size its KV pool, warm it up with one tiny step.

    ``tensor_parallel_size`` > 1 runs a TensorParallelVerifier. Raises
    FileNotFoundError / ValueError (model), MemoryBudgetError (KV budget).
    """
    if cfg.tensor_parallel_size > 1:
        return _build_tensor_parallel(cfg, replica, log)
    model, tok = main_model(cfg)
    slots, max_len = plan_slots(cfg, model, TreeBudget.from_config(cfg).kv_headroom)
    blocks = plan_prefix_blocks(cfg, model, slots, max_len)
    runner = VerifierRunner(model, slots, max_len, GrammarMasks.from_hf(tok, model.spec.vocab_size, eos_ids(tok)),
                            blocks, cfg.prefix_cache_block_size)
    _warm_up(runner)
    cost = measure_forward_ms(model, runner.cache) if cfg.tree_size == AUTO else []
    log.info("main model ready", model=cfg.main_model_path, slots=slots, max_len=max_len, cost_ms=cost,
             prefix_cache_blocks=blocks)
    hello = wire.Hello(role=wire.Role.VERIFIER, replica=replica, pid=os.getpid(), slots_total=slots, max_len=max_len,
                       eos_ids=sorted(eos_ids(tok)), cost_ms=cost,
                       devices=device_ids(cfg.device), vocab_size=model.spec.vocab_size)
    return VerifierWorker(runner, hello)


def _warm_up(runner) -> None:
    empty = wire.tree_to_wire(TokenTree.empty())
    seq = wire.VerifySeq(seq_id=WARMUP_ID, prefix_len=0, new_tokens=WARMUP_TOKENS, tree=empty,
                         params=wire.SamplingParams())
    runner.step(wire.VerifyStep(round=0, seqs=[seq]))
    runner.free([WARMUP_ID], keep=False)


def _build_tensor_parallel(cfg: Config, replica: str, log) -> VerifierWorker:
    """Rank 0 of a tensor-parallel group (``services/verifier/tensor_parallel.py``) serves
    ZeroMQ; slots are sized as for one rank holding the whole KV (conservative)."""
    from services.verifier import tensor_parallel
    model, tok = main_model(cfg)
    slots, max_len = plan_slots(cfg, model, TreeBudget.from_config(cfg).kv_headroom)
    vocab = model.spec.vocab_size
    del model
    tp = tensor_parallel.build_verifier(cfg.main_model_path, cfg.dtype, slots, max_len,
                                        cfg.tensor_parallel_size, cfg.device)
    _warm_up(tp)
    log.info("tensor-parallel verifier ready", ranks=cfg.tensor_parallel_size, slots=slots, max_len=max_len)
    devices = device_ids(tensor_parallel.rank_device(cfg.device, 0), cfg.tensor_parallel_size)
    hello = wire.Hello(role=wire.Role.VERIFIER, replica=replica, pid=os.getpid(), slots_total=slots, max_len=max_len,
                       eos_ids=sorted(eos_ids(tok)),
                       devices=devices, vocab_size=vocab)
    return VerifierWorker(tp, hello)
