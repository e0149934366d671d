"""Build the draft worker: int4/FR-Spec draft model, KV pool sized to the memory budget."""

from __future__ import annotations

import os
from dataclasses import dataclass

from common import wire
from common.config import AUTO, Config
from common.modeling.budget import plan_prefix_blocks, plan_slots
from common.modeling.devices import device_ids
from common.modeling.build import check_draft_against_main, draft_model, eos_ids
from common.modeling.runner import measure_forward_ms
from common.modeling.grammar import GrammarMasks
from common.tree_budget import TreeBudget
from services.draft.runner import DraftRunner
from services.worker import WARMUP_ID, WARMUP_TOKENS, prefix_stats


@dataclass
class DraftWorker:
    runner: DraftRunner
    hello: wire.Hello

    def slots_used(self) -> int:
        return self.runner.cache.slots_used

    def prefix_stats(self) -> tuple[int, int, int, int]:
        return prefix_stats(self.runner.table.prefix)

    @property
    def kernel_plan(self):
        """The draft model's kernel_probe.KernelPlan."""
        return self.runner.model.kernel_plan

    @property
    def attention_plan(self):
        """The draft model's attention_probe.AttentionPlan (None: not measured)."""
        return self.runner.model.attention_plan


def build_draft(cfg: Config, replica: str, log) -> DraftWorker:
    """Load the draft model, size its KV pool, warm it up with one tiny step.

    Raises FileNotFoundError / ValueError (model), MemoryBudgetError (KV budget).
    """
    model, tok = draft_model(cfg)
    check_draft_against_main(cfg, model, tok)
    slots, max_len = plan_slots(cfg, model, TreeBudget.from_config(cfg).kv_headroom)
    blocks = plan_prefix_blocks(cfg, model, slots, max_len)
    runner = DraftRunner(model, slots, max_len,
                         grammar=GrammarMasks.from_hf(tok, model.spec.vocab_size, eos_ids(tok)),
                         prefix_blocks=blocks, block_size=cfg.prefix_cache_block_size,
                         fast_forward=cfg.grammar_fast_forward)
    size, depth = TreeBudget.from_config(cfg).default_shape()
    runner.step(wire.DraftStep(round=0, seqs=[wire.DraftSeq(seq_id=WARMUP_ID, prefix_len=0, new_tokens=WARMUP_TOKENS,
                                                            tree_size=max(size, 1), max_depth=max(depth, 1))]))
    runner.free([WARMUP_ID], keep=False)
    cost = measure_forward_ms(model, runner.cache) if cfg.tree_size == AUTO else []
    log.info("draft model ready", model=cfg.draft_model_path, slots=slots, max_len=max_len, cost_ms=cost,
             prefix_cache_blocks=blocks)
    return DraftWorker(runner, wire.Hello(role=wire.Role.DRAFT, replica=replica, pid=os.getpid(), slots_total=slots,
                                          max_len=max_len, cost_ms=cost,
                                              devices=device_ids(cfg.device)))
