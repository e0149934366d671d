"""Prefix cache: KV blocks of finished / prefilled prompts, reused by new sequences.

Design (why a block *pool* with copy-in, not shared pages): the KV cache is slot-based —
attention (SDPA on CPU, the Triton kernel on CUDA) reads one contiguous ``[max_len]`` strip
per sequence, and tree verification / the accepted-path commit write rows in place inside
that strip. Sharing pages between strips would need a block table in both attention paths.
Instead retained KV lives in a separate pool ``[layers, blocks, B, kv_heads, head_dim]``:

* ``store`` copies the full B-token blocks of a sequence's committed rows into the pool,
  keyed by the chained hash of the token prefix (``common.prefix_hash``);
* ``load`` finds the longest chain of cached blocks matching a new prompt and copies it into
  the new sequence's slot rows ``[0, n*B)``; only the rest is prefilled.

A running sequence never references a pool block after its copy, so tree rows and the
commit can never write into shared KV (copy-on-reuse: the write-isolation holds by
construction), and evicting a block can never corrupt a running sequence. A block is
referenced only while one ``load``/``store`` call copies it (the ``protect`` set), so the
reference count is implicit in that single synchronous call. Eviction is LRU over blocks;
every touch of a chain refreshes it child-first, so a parent is always more recent than
its children and LRU removes the tails of chains before their heads (vLLM evicts in the
same order). The copy costs one memcpy of ``n*B`` rows per layer, far below the prefill
it saves. Cached KV depends on absolute RoPE positions; a prefix is only ever reused at
the same positions ``[0, n*B)``, where it was computed.

Matching is exact: each block keeps its tokens and its parent's key, both compared on
lookup, so a hash collision can never return the wrong KV.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from common.modeling.kv_cache import KVCache
from common.prefix_hash import ROOT_KEY, block_keys


@dataclass(frozen=True)
class _Block:
    index: int  # row of the pool tensors
    parent: int  # key of the previous block (ROOT_KEY for block 0)
    tokens: tuple[int, ...]


class PrefixCache:
    """Pool of retained KV blocks for one model (one tensor-parallel rank).

    Tensors ``k``/``v``: ``[layers, blocks, block_size, kv_heads, head_dim]`` in the KV
    cache's dtype, allocated uninitialised (pages are only touched when a block is stored).
    Counters (tokens, since start, vLLM's names): ``queries`` (prompt tokens looked up),
    ``hits`` (of those, reused from the pool).
    """

    def __init__(self, cache: KVCache, blocks: int, block_size: int) -> None:
        if blocks < 1 or block_size < 1:
            raise ValueError(f"PrefixCache needs blocks >= 1 and block_size >= 1, got {blocks}, {block_size}")
        layers, _, _, kvh, d = cache.k.shape
        shape = (layers, blocks, block_size, kvh, d)
        self.k = torch.empty(shape, dtype=cache.k.dtype, device=cache.k.device)
        self.v = torch.empty(shape, dtype=cache.v.dtype, device=cache.v.device)
        self.block_size = block_size
        self._index: OrderedDict[int, _Block] = OrderedDict()  # key -> block, least recent first
        self._free = list(range(blocks - 1, -1, -1))
        self.queries = self.hits = 0

    @property
    def blocks_total(self) -> int:
        return self.k.shape[1]

    @property
    def blocks_used(self) -> int:
        return len(self._index)

    def keys(self) -> list[int]:
        """Keys of every cached block (least recently used first)."""
        return list(self._index)

    def match(self, tokens: list[int], limit: int) -> list[_Block]:
        """The longest chain of cached blocks equal to full blocks of ``tokens[:limit]``
        (refreshed in the LRU order)."""
        chain, parent = [], ROOT_KEY
        B = self.block_size
        keys = block_keys(tokens, B, limit)
        for j, key in enumerate(keys):
            blk = self._index.get(key)
            if blk is None or blk.parent != parent or blk.tokens != tuple(tokens[j * B:(j + 1) * B]):
                break
            chain.append(blk)
            parent = key
        self._touch(keys[:len(chain)])
        return chain

    def load(self, cache: KVCache, slot: int, tokens: list[int]) -> int:
        """Copy the longest cached prefix of ``tokens`` into ``slot`` (length 0) and set its
        length; returns the tokens reused (a multiple of block_size, at most
        ``len(tokens) - 1``: the last token is always computed, its hidden state is needed).
        Counts ``queries`` / ``hits``."""
        if cache.lengths[slot] != 0:
            raise ValueError(f"slot {slot} must be empty to load a prefix, holds {cache.lengths[slot]}")
        chain = self.match(tokens, len(tokens) - 1)
        n = len(chain) * self.block_size
        self.queries += len(tokens)
        self.hits += n
        if n:
            idx = torch.tensor([b.index for b in chain], device=self.k.device)
            L, _, _, kvh, d = self.k.shape
            cache.k[:, slot, :n] = self.k[:, idx].reshape(L, n, kvh, d)
            cache.v[:, slot, :n] = self.v[:, idx].reshape(L, n, kvh, d)
            cache.lengths[slot] = n
        return n

    def store(self, cache: KVCache, slot: int, tokens: list[int]) -> int:
        """Retain the full blocks of ``tokens`` — the committed tokens of ``slot``, whose KV
        is in rows ``[0, len(tokens))`` — evicting least recently used blocks when the pool
        is full. Returns the number of blocks copied in (blocks already cached are only
        refreshed). Raises ValueError when the slot does not hold that many rows."""
        if len(tokens) > cache.lengths[slot]:
            raise ValueError(f"slot {slot} holds {cache.lengths[slot]} rows, cannot store {len(tokens)} tokens")
        B = self.block_size
        keys = block_keys(tokens, B)[: self.blocks_total]
        protect, new, parent = set(keys), [], ROOT_KEY
        for j, key in enumerate(keys):
            block_tokens = tuple(tokens[j * B:(j + 1) * B])
            blk = self._index.get(key)
            if blk is not None and (blk.parent != parent or blk.tokens != block_tokens):
                keys = keys[:j]  # a hash collision: keep what precedes it
                break
            if blk is None:
                index = self._take(protect)
                if index is None:
                    keys = keys[:j]
                    break
                self._index[key] = _Block(index, parent, block_tokens)
                new.append((j, index))
            parent = key
        if new:
            L, _, _, kvh, d = self.k.shape
            src = torch.tensor([j for j, _ in new], device=self.k.device)
            dst = torch.tensor([i for _, i in new], device=self.k.device)
            rows = len(keys) * B
            self.k[:, dst] = cache.k[:, slot, :rows].reshape(L, len(keys), B, kvh, d)[:, src]
            self.v[:, dst] = cache.v[:, slot, :rows].reshape(L, len(keys), B, kvh, d)[:, src]
        self._touch(keys)
        return len(new)

    def clear(self) -> None:
        """Drop every cached block (counters are kept)."""
        self._free.extend(b.index for b in self._index.values())
        self._index.clear()

    def _take(self, protect: set[int]) -> int | None:
        """A free pool row, evicting the least recently used block outside ``protect``."""
        if self._free:
            return self._free.pop()
        victim = next((k for k in self._index if k not in protect), None)
        if victim is None:
            return None
        return self._index.pop(victim).index

    def _touch(self, keys: list[int]) -> None:
        """Mark a chain most recently used, child first, so each parent ends more recent."""
        for key in reversed(keys):
            if key in self._index:
                self._index.move_to_end(key)
