"""Build draft / verifier runners (and the in-process engine) from a Config."""

from __future__ import annotations

import logging

import torch

from common.config import AUTO, Config
from common.tokenizer import END_MARKERS
from common.modeling.loader import check_same_vocabulary, load_weights, DTYPES
from common.modeling.model import DecoderModel
from common.modeling.quant import quantize_weights

log = logging.getLogger(__name__)


def draft_model(cfg: Config) -> tuple[DecoderModel, object]:
    """The draft model: int4 weights on CPU (``draft_quantization``), LM head restricted to
    the ``draft_vocab_size`` lowest token ids (FR-Spec, arXiv 2502.14856 §3.1: byte-level
    BPE assigns ids in merge order, so low ids are the frequent tokens)."""
    spec, weights, tok = load_weights(cfg.draft_model_path, cfg.dtype)
    if cfg.draft_quantization == "int4" and cfg.device == "cpu" and cfg.dtype == "bfloat16":
        weights = quantize_weights(weights, keep_dense=True)
    head_ids = None
    if 0 < cfg.draft_vocab_size < spec.vocab_size:
        head_ids = torch.arange(cfg.draft_vocab_size, device=cfg.device)
        specials = _special_ids(tok, spec.vocab_size)
        head_ids = torch.unique(torch.cat([head_ids, torch.tensor(specials, dtype=torch.long)]))
    weights = {k: (tuple(t.to(cfg.device) for t in v) if isinstance(v, tuple) else v.to(cfg.device))
               for k, v in weights.items()}
    return DecoderModel(spec, weights, DTYPES[cfg.dtype], cfg.device, head_ids), tok


def _special_ids(tok, vocab: int) -> list[int]:
    """Special tokens (EOS, chat markers) that must stay proposable by the draft."""
    if tok is None:
        return []
    ids = set(getattr(tok, "all_special_ids", []) or [])
    return sorted(i for i in ids if 0 <= i < vocab)


def main_model(cfg: Config) -> tuple[DecoderModel, object]:
    """The main (target) model, never quantized."""
    spec, weights, tok = load_weights(cfg.main_model_path, cfg.dtype)
    weights = {k: v.to(cfg.device) for k, v in weights.items()}
    return DecoderModel(spec, weights, DTYPES[cfg.dtype], cfg.device), tok


def check_pair(main_tok, draft_tok, main: DecoderModel, draft: DecoderModel) -> None:
    """Refuse a draft whose tokenizer differs from the main model's (VocabularyMismatchError)."""
    if main_tok is None or draft_tok is None:
        if main.spec.vocab_size != draft.spec.vocab_size:
            raise ValueError(f"vocabulary sizes differ: main {main.spec.vocab_size}, draft {draft.spec.vocab_size}")
        return
    note = check_same_vocabulary(main_tok, draft_tok, main.spec.vocab_size, draft.spec.vocab_size)
    if note:
        log.info("draft/main vocabulary: %s", note)


def check_draft_against_main(cfg: Config, draft: DecoderModel, draft_tok) -> None:
    """Draft worker start-up check: compare the draft's tokenizer with the main model's
    (tokenizers only; the main weights are not loaded). Raises VocabularyMismatchError."""
    from common.modeling import tiny
    from common.modeling.loader import load_weights_tokenizer_only, packaged_tokenizer
    main_tok = (packaged_tokenizer() if tiny.is_tiny(cfg.main_model_path)
                else load_weights_tokenizer_only(cfg.main_model_path))
    if main_tok is None or draft_tok is None:
        return
    note = check_same_vocabulary(main_tok, draft_tok, len(main_tok), len(draft_tok))
    if note:
        log.info("draft/main vocabulary: %s", note)


def eos_ids(tok) -> set[int]:
    """Token ids that end generation: the tokenizer's EOS plus Qwen's end-of-turn markers."""
    if tok is None:
        return set()
    vocab = tok.get_vocab()
    ids = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    return ids | {vocab[t] for t in END_MARKERS if t in vocab}


def load_pair(cfg: Config, with_draft: bool = True):
    """(main model, draft model or None, tokenizer); refuses a mismatched draft."""
    main, tok = main_model(cfg)
    draft = None
    if with_draft:
        draft, dtok = draft_model(cfg)
        check_pair(tok, dtok, main, draft)
    return main, draft, tok


def measure_costs(main: DecoderModel, draft: DecoderModel | None):
    """(verify CostCurve, draft CostCurve or None): ms per forward over T tokens, measured
    now on this machine with scratch KV caches."""
    from common.modeling.runner import COST_PREFIX, measure_forward_ms
    from services.scheduler.tree_policy import CostCurve
    grid_max = 256 + COST_PREFIX
    verify = CostCurve(tuple(measure_forward_ms(main, main.new_cache(1, grid_max))))
    dcurve = CostCurve(tuple(measure_forward_ms(draft, draft.new_cache(1, grid_max)))) if draft else None
    return verify, dcurve


def make_engine(cfg: Config, main: DecoderModel, draft: DecoderModel | None, tok, slots: int,
                tree: tuple[int, int] | None = None, costs=None):
    """A LocalEngine over already-loaded models. ``tree`` = (size, max_depth) forces a
    shape (size 0 = plain); without it ``tree_size = auto`` uses a TreePolicy fed with
    ``costs`` (from measure_costs; measured here when not given)."""
    from services.draft.runner import DraftRunner
    from services.scheduler.core import SchedulerCore
    from services.scheduler.local import LocalEngine
    from services.scheduler.tree_policy import TreePolicy, choose_tree
    from services.verifier.runner import VerifierRunner
    policy = None
    if tree is None and cfg.tree_size == AUTO and draft is not None:
        policy = TreePolicy(cfg)
        policy.set_costs(*(costs or measure_costs(main, draft)))
    tree = tree or choose_tree(cfg, slots)
    from common.modeling.budget import plan_prefix_blocks
    max_len = cfg.max_model_len + TREE_HEADROOM
    bs = cfg.prefix_cache_block_size
    runner = None
    if draft is not None and tree[0] > 0:
        runner = DraftRunner(draft, slots, max_len, prefix_blocks=plan_prefix_blocks(cfg, draft, slots, max_len),
                             block_size=bs)
    core = SchedulerCore(slots, cfg.max_queue, cfg.max_model_len, eos_ids(tok))
    verifier = VerifierRunner(main, slots, max_len, plan_prefix_blocks(cfg, main, slots, max_len), bs)
    return LocalEngine(core, verifier, runner, tree[0], tree[1], policy)


def build_local_engine(cfg: Config, slots: int = 4, tree: tuple[int, int] | None = None):
    """(LocalEngine, tokenizer) running draft + main model in this process.

    ``tree`` = (tree_size, max_depth) overrides the config; tree_size 0 = plain decoding.
    """
    main, draft, tok = load_pair(cfg, with_draft=(tree or (1,))[0] > 0 and cfg.tree_size != 0)
    return make_engine(cfg, main, draft, tok, slots, tree), tok


TREE_HEADROOM = 256  # KV rows past max_model_len for tree nodes being verified / drafted
