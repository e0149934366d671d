"""Assemble the in-process engine (``services/scheduler/local.py``) from a Config.

This sits above the services on purpose: it builds the draft and verifier runners the
worker processes would own and hands them to the scheduler's round driver through an
in-process transport. ``common/modeling`` only loads models.
"""

from __future__ import annotations

from dataclasses import replace

from common.config import Config
from common.modeling.budget import plan_prefix_blocks
from common.modeling.build import eos_ids, load_pair
from common.modeling.grammar import GrammarMasks
from common.modeling.model import DecoderModel
from common.modeling.runner import COST_PREFIX, measure_forward_ms
from common.tree_budget import TreeBudget
from services.draft.runner import DraftRunner
from services.scheduler.core import SchedulerCore
from services.scheduler.local import LocalEngine
from services.scheduler.estimates import CostCurve
from services.verifier.runner import VerifierRunner

COST_GRID_TOKENS = 256  # largest forward measured for the tree_size=auto cost curves


def measure_costs(main: DecoderModel, draft: DecoderModel | None) -> tuple[CostCurve, CostCurve | None]:
    """(verify CostCurve, draft CostCurve or None): ms per forward over T tokens, measured
    now on this machine with scratch KV caches."""
    grid_max = COST_GRID_TOKENS + COST_PREFIX
    verify = CostCurve(tuple(measure_forward_ms(main, main.new_cache(1, grid_max))))
    dcurve = CostCurve(tuple(measure_forward_ms(draft, draft.new_cache(1, grid_max)))) if draft else None
    return verify, dcurve


def with_tree(cfg: Config, tree: tuple[int, int] | None) -> Config:
    """``cfg`` with its tree budget forced to ``tree`` = (size, max depth); size 0 = plain."""
    if tree is None:
        return cfg
    return replace(cfg, tree_size=tree[0], max_accept_length=max(tree[1], 1))


def make_engine(cfg: Config, main: DecoderModel, draft: DecoderModel | None, tok, slots: int,
                tree: tuple[int, int] | None = None, costs=None) -> LocalEngine:
    """A LocalEngine over already-loaded models. ``tree`` = (size, max_depth) forces a
    shape (size 0 = plain); without it ``tree_size = auto`` uses the TreePolicy fed with
    ``costs`` (from measure_costs; measured here when not given)."""
    cfg = with_tree(cfg, tree)
    budget = TreeBudget.from_config(cfg)
    if budget.auto and draft is not None and costs is None:
        costs = measure_costs(main, draft)
    max_len = cfg.max_model_len + budget.kv_headroom
    grammar = GrammarMasks.from_hf(tok, main.spec.vocab_size, eos_ids(tok))
    runner = None
    if draft is not None and budget.speculative:
        runner = DraftRunner(draft, slots, max_len, grammar=grammar.sibling() if grammar else None,
                             prefix_blocks=plan_prefix_blocks(cfg, draft, slots, max_len),
                             block_size=cfg.prefix_cache_block_size, fast_forward=cfg.grammar_fast_forward)
    if runner is None:
        cfg = replace(cfg, tree_size=0)
    core = SchedulerCore(slots, cfg.max_queue, cfg.max_model_len, eos_ids(tok))
    verifier = VerifierRunner(main, slots, max_len, grammar, plan_prefix_blocks(cfg, main, slots, max_len),
                              cfg.prefix_cache_block_size)
    return LocalEngine(cfg, core, verifier, runner, costs if runner else None)


def build_local_engine(cfg: Config, slots: int = 4, tree: tuple[int, int] | None = None):
    """(LocalEngine, tokenizer) running draft + main model in this process.

    ``tree`` = (tree_size, max_depth) overrides the config; tree_size 0 = plain decoding.
    """
    speculative = TreeBudget.from_config(with_tree(cfg, tree)).speculative
    main, draft, tok = load_pair(cfg, with_draft=speculative)
    return make_engine(cfg, main, draft, tok, slots, tree), tok
