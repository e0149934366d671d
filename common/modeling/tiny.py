"""Tiny random-weight models for tests and fast local runs.

A model path ``tiny-random:<seed>`` (e.g. ``tiny-random:0``) builds a 2-layer Qwen2-shaped
decoder with seeded random weights and the packaged Qwen tokenizer's vocabulary size, so
that text in, text out works end to end (tokenizer from the packaged draft model when it
has been fetched, else the tokenizer is None and callers use token ids).
``tiny-random:<seed>:<scale>`` multiplies the random weights' spread (sharper
distributions, so greedy decoding has clear winners).
"""

from __future__ import annotations

import torch

from common.modeling.model import ModelSpec

PREFIX = "tiny-random:"
TINY_VOCAB = 151936


def is_tiny(path: str) -> bool:
    return path.startswith(PREFIX)


def tiny_spec(vocab_size: int = TINY_VOCAB) -> ModelSpec:
    """2 layers, hidden 64, 4 query heads / 2 KV heads of 16 dims (GQA like Qwen2)."""
    return ModelSpec(vocab_size=vocab_size, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                     head_dim=16, intermediate_size=128, rope_theta=10000.0, rms_eps=1e-6,
                     qkv_bias=True, max_positions=8192)


def tiny_weights(spec: ModelSpec, seed: int, dtype: torch.dtype = torch.float32,
                 scale: float = 1.0) -> dict[str, torch.Tensor]:
    """Seeded random weights with treespec's weight names (see loader.convert_state_dict)."""
    g = torch.Generator().manual_seed(seed)
    H, D, I = spec.hidden_size, spec.head_dim, spec.intermediate_size
    qkv = (spec.num_heads + 2 * spec.num_kv_heads) * D

    def rnd(*shape, std=0.08):
        return (torch.randn(*shape, generator=g) * std * scale).to(dtype)

    w = {"embed": rnd(spec.vocab_size, H, std=0.5), "norm": torch.ones(H, dtype=dtype)}
    w["lm_head"] = rnd(spec.vocab_size, H, std=0.3)
    for i in range(spec.num_layers):
        w[f"layers.{i}.qkv.weight"] = rnd(qkv, H)
        w[f"layers.{i}.qkv.bias"] = rnd(qkv, std=0.02)
        w[f"layers.{i}.o.weight"] = rnd(H, spec.num_heads * D)
        w[f"layers.{i}.gate_up.weight"] = rnd(2 * I, H)
        w[f"layers.{i}.down.weight"] = rnd(H, I)
        w[f"layers.{i}.in_norm"] = torch.ones(H, dtype=dtype)
        w[f"layers.{i}.post_norm"] = torch.ones(H, dtype=dtype)
    return w


def parse(path: str) -> tuple[int, float]:
    """``tiny-random:<seed>[:<scale>]`` -> (seed, scale); raises ValueError when malformed."""
    parts = path[len(PREFIX):].split(":")
    try:
        return int(parts[0]), float(parts[1]) if len(parts) > 1 else 4.0
    except (ValueError, IndexError) as exc:
        raise ValueError(f"tiny model path must look like tiny-random:<seed>[:<scale>], got {path!r}") from exc
