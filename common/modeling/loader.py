"""Load a main or draft model (GGUF file or HF directory) into a :class:`DecoderModel`.

GGUF files are read through transformers (``from_pretrained(dir, gguf_file=...)``, which
dequantizes them); the converted dense weights and tokenizer are then cached beside the
model as safetensors (written atomically) so later starts take seconds, not a minute.
Every load first establishes the model's SHA256 (``common/integrity.py``: from its stamp,
re-hashed when the file changed; a packaged model must match its pinned digest); the
cache is keyed by that digest, and a cache whose manifest does not bind it to the digest
(a planted or damaged directory) is refused, deleted and rebuilt.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

import torch

from common import integrity
from common.models import resolve
from common.tokenizer import converted_tokenizer_dir
from common.modeling import tiny
from common.modeling.model import DecoderModel, ModelSpec

log = logging.getLogger(__name__)

MANIFEST = "source.json"  # converted cache: source digest, weights digest, spec
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class VocabularyMismatchError(ValueError):
    """Draft and main models do not share a tokenizer (token -> id map)."""


def convert_state_dict(sd: dict[str, torch.Tensor], spec: ModelSpec) -> dict[str, torch.Tensor]:
    """transformers Qwen2/Llama state dict -> treespec weights (fused QKV and gate/up)."""
    w = {"embed": sd["model.embed_tokens.weight"], "norm": sd["model.norm.weight"]}
    w["lm_head"] = sd.get("lm_head.weight", w["embed"])
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        w[f"layers.{i}.qkv.weight"] = torch.cat([sd[p + f"self_attn.{n}_proj.weight"] for n in "qkv"])
        if spec.qkv_bias:
            w[f"layers.{i}.qkv.bias"] = torch.cat([sd[p + f"self_attn.{n}_proj.bias"] for n in "qkv"])
        w[f"layers.{i}.o.weight"] = sd[p + "self_attn.o_proj.weight"]
        w[f"layers.{i}.gate_up.weight"] = torch.cat([sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"]])
        w[f"layers.{i}.down.weight"] = sd[p + "mlp.down_proj.weight"]
        w[f"layers.{i}.in_norm"] = sd[p + "input_layernorm.weight"]
        w[f"layers.{i}.post_norm"] = sd[p + "post_attention_layernorm.weight"]
    return {k: v.contiguous() for k, v in w.items()}


def _cache_dir_for(path: Path, digest: str, dtype: str) -> Path:
    """The converted cache of a model: keyed by the SHA256 of its source (not its mtime)."""
    size = path.stat().st_size if path.is_file() else 0
    return path.parent / ".converted" / f"{path.stem}-{size}-sha{digest[:32]}-{dtype}"


def converted_problem(conv: Path, source_sha256: str) -> str | None:
    """Why the converted cache ``conv`` must not be loaded (None: it may be): its manifest
    must name the verified source digest, its weights must still hash to the digest the
    manifest recorded, and its spec must be the one the manifest recorded."""
    try:
        manifest = json.loads((conv / MANIFEST).read_text())
        spec = json.loads((conv / "spec.json").read_text())
    except (OSError, ValueError) as exc:
        return f"no readable manifest ({exc.__class__.__name__})"
    if manifest.get("source_sha256") != source_sha256:
        return "it was converted from another source file"
    if manifest.get("spec") != spec:
        return "its spec.json differs from the one recorded at conversion"
    if integrity.file_digest(conv / "weights.safetensors") != manifest.get("weights_sha256"):
        return "its weights do not match the digest recorded at conversion"
    return None


def _load_transformers(path: Path, dtype: torch.dtype):
    """(ModelSpec, weights, tokenizer) from a GGUF file or HF directory via transformers."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    kw = {"gguf_file": path.name} if path.is_file() else {}
    root = path.parent if path.is_file() else path
    hf = AutoModelForCausalLM.from_pretrained(root, dtype=dtype, **kw)
    tok = AutoTokenizer.from_pretrained(root, **kw)
    spec = ModelSpec.from_hf_config(hf.config)
    weights = convert_state_dict({k: v.to(dtype) for k, v in hf.state_dict().items()}, spec)
    return spec, weights, tok


def _save_converted(target: Path, spec: ModelSpec, weights: dict, tok, source_sha256: str) -> None:
    """Write the converted model to ``target`` atomically (temp dir + rename)."""
    from safetensors.torch import save_file
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    shared = weights["lm_head"].data_ptr() == weights["embed"].data_ptr()
    save_file({k: v for k, v in weights.items() if not (shared and k == "lm_head")}, tmp / "weights.safetensors")
    (tmp / "spec.json").write_text(json.dumps(asdict(spec)))
    tok.save_pretrained(tmp / "tokenizer")
    weights_sha = integrity.sha256_file(tmp / "weights.safetensors")
    (tmp / MANIFEST).write_text(json.dumps({"source_sha256": source_sha256, "weights_sha256": weights_sha,
                                            "spec": asdict(spec)}))
    if target.exists():  # another process converted it first
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        os.replace(tmp, target)
    prune_stale(target)


def prune_stale(current: Path) -> list[Path]:
    """Delete the converted caches of the same model file and dtype that ``current`` replaces.

    Their names are ``<stem>-<size>-<key>-<dtype>`` like ``current``'s, with another size or
    key (the file was replaced, or an older treespec keyed the cache by mtime). Each holds a
    whole dense copy (GBs), so leaving them would fill the disk one upgrade at a time. A worker
    still reading one keeps its open files (POSIX unlink). Returns the deleted directories.
    """
    stem, dtype = _cache_parts(current.name)
    if stem is None:
        return []
    stale = [d for d in current.parent.iterdir()
             if d != current and d.is_dir() and _cache_parts(d.name) == (stem, dtype)]
    for d in stale:
        log.info("removing stale converted cache %s (replaced by %s)", d, current.name)
        shutil.rmtree(d, ignore_errors=True)
    return stale


def _cache_parts(name: str) -> tuple[str | None, str | None]:
    """(stem, dtype) of a converted-cache directory name, or (None, None) for anything else
    (stamps, temp dirs, tokenizer-only caches)."""
    m = re.fullmatch(rf"(.+)-\d+-(?:sha[0-9a-f]{{32}}|\d+)-({'|'.join(DTYPES)})", name)
    return (m.group(1), m.group(2)) if m else (None, None)


def is_converted(path_or_name: str, dtype: str = "bfloat16", cache: str | None = None) -> bool:
    """Whether ``load_weights`` would load this model from its converted cache (no conversion).

    Raises ValueError (unknown dtype), FileNotFoundError (model file missing) or
    IntegrityError (a packaged model that is not its pinned file).
    """
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)}")
    path = resolve(path_or_name, cache)
    digest = integrity.model_digest(path_or_name, path)
    conv = _cache_dir_for(path, digest, dtype)
    return conv.exists() and converted_problem(conv, digest) is None


def load_weights(path_or_name: str, dtype: str = "bfloat16", cache: str | None = None):
    """Return ``(spec, weights, tokenizer)`` for a packaged name, GGUF file or HF dir.

    Raises FileNotFoundError (missing model) or ValueError (unknown dtype / architecture).
    """
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)}")
    if tiny.is_tiny(path_or_name):
        seed, scale = tiny.parse(path_or_name)
        spec = tiny.tiny_spec()
        return spec, tiny.tiny_weights(spec, seed, DTYPES[dtype], scale), packaged_tokenizer(cache)
    path = resolve(path_or_name, cache)
    digest = integrity.model_digest(path_or_name, path)  # IntegrityError: not the pinned file
    conv = _cache_dir_for(path, digest, dtype)
    why = converted_problem(conv, digest) if conv.exists() else None
    if why is not None:  # planted or damaged: never load it; rebuild from the verified source
        log.warning("refusing converted cache %s: %s", conv, why)
        shutil.rmtree(conv, ignore_errors=True)
    if conv.exists():
        from safetensors.torch import load_file
        from transformers import AutoTokenizer
        spec = ModelSpec(**json.loads((conv / "spec.json").read_text()))
        weights = load_file(conv / "weights.safetensors")
        weights.setdefault("lm_head", weights["embed"])
        return spec, weights, AutoTokenizer.from_pretrained(conv / "tokenizer")
    spec, weights, tok = _load_transformers(path, DTYPES[dtype])
    try:
        _save_converted(conv, spec, weights, tok, digest)
    except OSError as exc:  # read-only model volume: run without the cache
        log.warning("cannot cache converted weights at %s: %s", conv, exc)
    return spec, weights, tok


def packaged_tokenizer(cache: str | None = None):
    """The Qwen2.5 tokenizer of the packaged draft model, or None if it is not fetched."""
    try:
        return load_weights_tokenizer_only("qwen2.5-coder-0.5b", cache)
    except FileNotFoundError:
        return None


def load_weights_tokenizer_only(path_or_name: str, cache: str | None = None):
    """Load only the tokenizer of a model (from the converted cache when present)."""
    from transformers import AutoTokenizer
    path = resolve(path_or_name, cache)
    converted = converted_tokenizer_dir(path)
    if converted is not None:
        return AutoTokenizer.from_pretrained(converted)
    kw = {"gguf_file": path.name} if path.is_file() else {}
    return AutoTokenizer.from_pretrained(path.parent if path.is_file() else path, **kw)


def load_model(path_or_name: str, dtype: str = "bfloat16", device: str = "cpu",
               head_ids: torch.Tensor | None = None, cache: str | None = None):
    """Load ``(DecoderModel, tokenizer)``; ``head_ids`` restricts the LM head (FR-Spec)."""
    spec, weights, tok = load_weights(path_or_name, dtype, cache)
    weights = {k: v.to(device) for k, v in weights.items()}
    return DecoderModel(spec, weights, DTYPES[dtype], device, head_ids), tok


def check_same_vocabulary(main_tok, draft_tok, main_rows: int, draft_rows: int) -> str | None:
    """Ensure draft and main map every token to the same id.

    Embedding row counts may differ by padding (e.g. 151936 vs 152064): that returns a
    note to log. Raises VocabularyMismatchError naming both vocabularies otherwise.
    """
    mv, dv = main_tok.get_vocab(), draft_tok.get_vocab()
    if mv != dv:
        diff = sum(1 for t, i in dv.items() if mv.get(t) != i)
        raise VocabularyMismatchError(
            f"draft tokenizer ({len(dv)} tokens, {type(draft_tok).__name__}) does not match the main "
            f"model's ({len(mv)} tokens, {type(main_tok).__name__}): {diff} draft tokens map to other ids")
    if main_rows != draft_rows:
        return f"embedding rows differ (main {main_rows}, draft {draft_rows}); rows past {len(mv)} are padding"
    return None
