"""Chained block hashes of a token prefix: the key of the prefix cache. Torch-free.

The key of block ``j`` (tokens ``[j*B, (j+1)*B)``) hashes the key of block ``j - 1``
together with its own tokens, so one key names the whole prefix up to the end of its block
(vLLM automatic prefix caching, SGLang's radix tree at block granularity). Only full blocks
get keys. Python's tuple-of-int hash is deterministic across processes (PYTHONHASHSEED only
salts str/bytes), so the scheduler and the workers compute the same keys.
"""

from __future__ import annotations

ROOT_KEY = 0  # the "parent" of block 0


def block_keys(tokens: list[int], block_size: int, limit: int | None = None) -> list[int]:
    """Keys of the full blocks of ``tokens[:limit]`` (all of them when ``limit`` is None).

    Raises ValueError for ``block_size < 1``.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    n = len(tokens) if limit is None else min(limit, len(tokens))
    keys, key = [], ROOT_KEY
    for start in range(0, n - n % block_size, block_size):
        key = hash((key, tuple(tokens[start:start + block_size])))
        keys.append(key)
    return keys

