"""Load the draft and main models from a Config (engines are assembled above the services,
in ``treespec/engine.py``; nothing here imports ``services``)."""

from __future__ import annotations

import logging
import os

import torch

from common.config import Config
from common.tokenizer import END_MARKERS
from common.modeling.attention_probe import install as install_attention
from common.modeling.kernel_probe import install as install_kernels
from common.modeling.loader import check_same_vocabulary, load_weights, DTYPES
from common.modeling.model import DecoderModel
from common.modeling.quant import Int8Weight, int4_codes, quantize_int8, quantize_main_weights, quantize_weights, weight_bytes

log = logging.getLogger(__name__)


def draft_model(cfg: Config) -> tuple[DecoderModel, object]:
    """The draft model: int4 or int8 weights on CPU (``draft_quantization``; its LM head is then
    quantized too, ``_draft_head``), LM head restricted to the ``draft_vocab_size`` lowest token ids (FR-Spec, arXiv
    2502.14856 §3.1: byte-level BPE assigns ids in merge order, so low ids are the frequent tokens)."""
    spec, weights, tok = load_weights(cfg.draft_model_path, cfg.dtype)
    if cfg.draft_quantization == "int4" and cfg.device == "cpu" and cfg.dtype == "bfloat16":
        weights = quantize_weights(weights, keep_dense=True)
    elif cfg.draft_quantization == "int8" and cfg.device == "cpu" and cfg.dtype == "bfloat16":
        weights = quantize_main_weights(weights, "int8", DTYPES[cfg.dtype])  # same scheme as an int8 main
    head_ids = None
    if 0 < cfg.draft_vocab_size < spec.vocab_size:
        specials = torch.tensor(_special_ids(tok, spec.vocab_size), dtype=torch.long)
        head_ids = torch.unique(torch.cat([torch.arange(cfg.draft_vocab_size), specials])).to(cfg.device)  # [K] int64
    weights = {k: v.to(cfg.device) for k, v in weights.items()}  # tensors and Int4Weights
    model = DecoderModel(spec, weights, DTYPES[cfg.dtype], cfg.device, head_ids)
    if cfg.draft_quantization != "none" and cfg.device == "cpu" and cfg.dtype == "bfloat16":
        _draft_head(model)  # read once per draft level; the main model verifies every proposal anyway
        _small_pass_attention(model)
    return with_kernels(cfg, model, DRAFT_PROBE_ROWS), tok


DRAFT_EXACT_MAX_ROWS = 8  # draft passes up to this many rows (levels, catch-ups) use ExactAttention ...
DRAFT_EXACT_MAX_COLS = 512  # ... after up to this many KV columns (the committed prefix), until measured:
DRAFT_PROBE_ROWS = (1, 4, DRAFT_EXACT_MAX_ROWS)  # the row counts attention_probe times (append, level, the limit)


def _small_pass_attention(model: DecoderModel) -> None:
    """Attention of a CPU draft's small passes by treespec's C++ kernel (``attention.ExactAttention``)
    instead of SDPA with a repeated mask: a 0.5B draft pass measured 12.5 ms instead of 14.2 at 1 row
    and 17.8 instead of 19.1 at 4 rows, the same at 8 (2-core Intel Xeon host). Prefills keep SDPA,
    whose blocked kernel is faster on long segments, and so do passes over long contexts: a 4-row level
    after a 1,000-token prefix took 22.4 ms with the C++ kernel and 20.8 with SDPA, after 2,000 tokens 27.4
    and 23.2, after 200 tokens 18.0 and 18.4 (same host). The draft need not be row-independent; this is
    speed only. No library (no g++): SDPA everywhere. These limits hold until the worker measures its
    own at start (``with_kernels``: ``attention_probe``); on the 2-core AMD EPYC Zen 5 host the C++ kernel
    won at 4 rows up to 2,048 columns (17.4 vs 18.4 ms) and at 1 row at 4,096 still (16.1 vs 21.6)."""
    _exact_attention(model, ((DRAFT_EXACT_MAX_ROWS, DRAFT_EXACT_MAX_COLS),))


def _exact_attention(model: DecoderModel, limits: tuple[tuple[int, int | None], ...]) -> None:
    """Route ``model``'s passes within ``limits`` (``DecoderModel.exact_limits``: ((max rows, max KV
    columns before the pass or None), ...); also ``exact_batch_limits``, which the start-up probe leaves
    as built) to ``attention.ExactAttention`` where it runs: on the CPU, in bf16 or fp32 (its dtypes),
    with the native library built. Otherwise nothing changes (SDPA)."""
    from common.modeling.native import library
    if str(model.device) != "cpu" or model.dtype not in (torch.bfloat16, torch.float32):
        return
    lib = library()
    if lib is not None:
        model.exact_lib, model.exact_limits, model.exact_batch_limits = lib, limits, limits


def _draft_head(model: DecoderModel) -> None:
    """A quantized CPU draft's LM head: int4 codes per group of 64 in the W4A8 kernel (``_w4a8_head``)
    where that kernel's AVX512-VNNI or AVX2 variant built, else int8 per row (``_int8_head``). The head is read
    at every draft level; on the 2-core Intel Xeon host (the 32,768-row head of Qwen2.5-Coder-0.5B) a
    depth-6 draft step took 82 ms with the W4A8 head and 97 ms with the int8 one, and over 3,101 prompt
    positions of HumanEval and Spec-Bench the main model's greedy token was among the draft's top 4 in
    79.7% vs 80.0% of positions (top 1: 61.2% vs 62.5%). ``TREESPEC_DRAFT_HEAD=int8`` keeps the int8
    head (an A/B switch for measurements)."""
    from common.modeling.native import library
    lib = library()
    if lib is None or not lib.w4a8_fast or os.environ.get("TREESPEC_DRAFT_HEAD", "w4a8") == "int8":
        _int8_head(model)
    else:
        _w4a8_head(model, lib)


def _w4a8_head(model: DecoderModel, lib) -> None:
    """Replace ``model``'s LM head by the W4A8 kernel's packed int4 codes (``native.pack_w4a8``)."""
    model.head_weight = lib.pack_w4a8(*int4_codes(model.head_weight, model.dtype))
    model.w.pop("lm_head", None)  # an untied bf16 head is not held twice (a tied one stays the embedding)


def _int8_head(model: DecoderModel) -> None:
    """Replace ``model``'s LM head by int8 with one scale per vocabulary row (``quant.Int8Weight``):
    half the bytes of a bf16 head, which a decode step reads whole (a Qwen2.5-1.5B head is 0.47 GB
    in bf16, more than half of the int4 layers' bytes). Each logit keeps about 0.4% relative error."""
    model.head_weight = Int8Weight(*quantize_int8(model.head_weight, model.dtype))
    model.w.pop("lm_head", None)  # an untied bf16 head is not held twice (a tied one stays the embedding)


def _special_ids(tok, vocab: int) -> list[int]:
    """Special tokens (EOS, chat markers) that must stay proposable by the draft."""
    if tok is None:
        return []
    ids = set(getattr(tok, "all_special_ids", []) or [])
    return sorted(i for i in ids if 0 <= i < vocab)


def main_model(cfg: Config) -> tuple[DecoderModel, object]:
    """The main (target) model. ``main_quantization`` int8 / int4 replaces its layer
    projection matrices by weight-only quantized ones (``quant.quantize_main_weights``) and its
    LM head by int8 (activations and KV cache keep ``dtype``); w4a8 runs both in the W4A8 kernel,
    with row-independent passes (``_row_independent``): the served model is then that
    quantized model, and speculation is lossless with respect to it. Raises ValueError for w4a8
    where its kernel cannot run (no g++, neither AVX512-VNNI nor AVX2)."""
    spec, weights, tok = load_weights(cfg.main_model_path, cfg.dtype)
    if cfg.main_quantization != "none":
        weights = quantize_main_weights(weights, cfg.main_quantization, DTYPES[cfg.dtype], cfg.main_int4_dense)
        log.info("main model weights: %s, %.2f GB", cfg.main_quantization, weight_bytes(weights) / 1e9)
    weights = {k: v.to(cfg.device) for k, v in weights.items()}  # tensors and quantized weights
    model = DecoderModel(spec, weights, DTYPES[cfg.dtype], cfg.device)
    if cfg.main_quantization == "w4a8":
        _row_independent(model)
    else:
        if cfg.main_quantization != "none":
            _int8_head(model)  # as llama.cpp's 4-bit files keep a 6-bit output head, not a 16-bit one
        _verify_pass_attention(model)
    return with_kernels(cfg, model, MAIN_PROBE_ROWS), tok


MAIN_EXACT_MAX_ROWS = 32  # main passes whose longest segment has at most this many rows: ExactAttention
# the row counts attention_probe times (decode, small and big trees, the limit). 4 and 8: a 16-row result
# decided every pass of 2-16 rows, and on the AVX2-only AMD EPYC Zen 2 host SDPA won 16 rows by 2% (383 vs
# 390 ms), which sent 4-8-row verify passes off the native layer loop, where they were 12-20 ms faster
# (4 rows after 512 columns: 145 vs 164 ms; 8: 222 vs 234; 9 s more of probing at start, once per host).
# Not 64: the C++ kernel won 64-row passes only by 1-6% (up to 512-1,024 columns, AMD EPYC Zen 5 host), and
# letting it take them did not measurably change auto's speed at batch 1 (HumanEval: +6.5% on 10 prompts,
# -5% on 20, while two arms with the same routing differed by 5%), for 8 s more of probing at start
MAIN_PROBE_ROWS = (1, 4, 8, 16, MAIN_EXACT_MAX_ROWS)


def _verify_pass_attention(model: DecoderModel) -> None:
    """Attention of a CPU main model's passes whose longest segment has at most ``MAIN_EXACT_MAX_ROWS`` rows
    (decode steps, verify passes of trees up to 31 nodes, short prefills) by treespec's C++ kernel
    (``attention.ExactAttention``), which also lets a bf16 pass whose projections the kernel plan packs
    take the native layer loop (``native_forward.py``). SDPA pads every segment of a batch to the longest
    one and repeats the mask per query group: at a batch of 8 where one sequence verifies 16 lookup rows
    and seven decode one token, it attended 8 x 17 rows, and the pass took 204 ms where the C++ kernel,
    over the 24 real rows, took 140 (300-token contexts; 471 vs 198 ms after 1,500 tokens). Plain
    decoding of 8 sequences took 90 ms instead of 105, one sequence 69 instead of 74. Longer segments
    (a big tree at batch 1, prompt prefills) keep SDPA, whose blocked kernel was 5-9% faster on 33-65
    rows after 1,500 tokens (2-core AMD EPYC Zen 5 host, bf16 Qwen2.5-Coder-1.5B;
    ``scripts/attention_layouts.py``). Each row's attention then no longer depends on the other rows of
    its pass. bf16 and fp32 activations only (the kernel's dtypes: fp16 keeps SDPA); a tensor-parallel
    main builds its shards without this (``services/verifier/tensor_parallel.py``); no library (no g++)
    or not on the CPU: SDPA everywhere. The worker then measures at start up to how many KV columns the
    kernel wins at 1, 4, 8, 16 and 32 rows (``with_kernels``: ``attention_probe``); on that host SDPA won at 32
    rows from 2,048 columns on (257.4 ms against the kernel's 285.1). Passes of several sequences keep
    these built limits too (``exact_batch_limits``): the probe times one sequence, and SDPA pads a batch."""
    _exact_attention(model, ((MAIN_EXACT_MAX_ROWS, None),))


def _row_independent(model: DecoderModel) -> None:
    """Make every pass of a W4A8 main compute each row as it would alone: its projections already
    do (the W4A8 kernel); the LM head joins them (int4 codes per group of 64, as the layers: 5 ms per
    1.5B step at 1 row where the packed int8 head took 21 ms, and 12 ms at 17 rows where it took 59, on
    the 2-core Intel Xeon host) and attention moves to ``attention.ExactAttention``. Greedy
    speculation then equals plain decoding bit for bit, although the W4A8 kernel's int8 rounding
    of activations would turn SDPA's shape-dependent float sums into different greedy tokens at
    near-ties."""
    from common.modeling.native import library  # present: quantize_main_weights("w4a8") needed it
    lib = library()
    _w4a8_head(model, lib)
    model.exact_lib = lib
    amx = f"AMX from {lib.w4a8_amx_rows} rows" if lib.w4a8_amx_rows else "no AMX"
    log.info("w4a8 main: W4A8 kernel (%s, %s) for every projection and the LM head, exact attention",
             lib.w4a8_variant, amx)


def with_kernels(cfg: Config, model: DecoderModel, attention_rows: tuple[int, ...] = ()) -> DecoderModel:
    """``model`` running the matmul kernels measured fastest on this host (config
    ``kernel_probe``; plans cached under the model cache directory, see kernel_probe.py), and, where
    its small passes attend by the C++ kernel within limits (``exact_limits``), those limits measured
    at ``attention_rows`` rows (``attention_probe.py``, same switch and cache directory)."""
    from common.models import cache_dir
    plans = cache_dir() / "kernel-plans"
    install_kernels(model, cfg.kernel_probe, plans)
    install_attention(model, attention_rows, cfg.kernel_probe, plans)
    return model


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
