"""Prefix cache: KV blocks of finished / prefilled prompts, reused by new sequences.

Design (why a block *pool* with copy-in, not shared pages): the KV cache is slot-based —
attention (SDPA on CPU, the Triton kernel on CUDA) reads one contiguous ``[max_len]`` strip
per sequence, and tree verification / the accepted-path commit write rows in place inside
that strip. Sharing pages between strips would need a block table in both attention paths.
Instead retained KV lives in a separate pool ``[layers, blocks, B, kv_heads, head_dim]``:

* ``store`` copies the full B-token blocks of a sequence's committed rows into the pool,
  keyed by the chained hash of the token prefix (``common.prefix_hash``), then its last
  partial block (fewer than B tokens: the tail of a prompt or of a finished answer);
* ``load`` finds the longest chain of cached full blocks matching a new prompt, then the
  child of that chain sharing the most leading tokens with the prompt's next tokens (a
  partial tail, or a full block the prompt leaves mid-block), and copies those
  ``n*B + k`` rows into the new sequence's slot; only the rest is prefilled. Matching at
  token granularity after the last full block is what SGLang's radix tree gives; without it
  a second chat turn re-prefills on average half a block of the first turn's answer.

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
    key: int  # chained hash of the prefix up to this block's end
    index: int  # row of the pool tensors
    parent: int  # key of the previous block (ROOT_KEY for block 0)
    tokens: tuple[int, ...]  # block_size tokens, fewer for a partial tail block


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
        self._children: dict[int, set[int]] = {}  # parent key -> keys of its cached children
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
        length; returns the tokens reused: full blocks, then the leading tokens of the best
        matching child block (at most ``len(tokens) - 1``: the last token is always computed,
        its hidden state is needed). Counts ``queries`` / ``hits``. Raises ValueError when
        the slot is not empty."""
        if cache.lengths[slot] != 0:
            raise ValueError(f"slot {slot} must be empty to load a prefix, holds {cache.lengths[slot]}")
        limit = len(tokens) - 1
        chain = self.match(tokens, limit)
        n = len(chain) * self.block_size
        idx = torch.tensor([b.index for b in chain], device=self.k.device, dtype=torch.long)
        L, _, B, kvh, d = self.k.shape
        cache.k[:, slot, :n] = self.k[:, idx].reshape(L, n, kvh, d)
        cache.v[:, slot, :n] = self.v[:, idx].reshape(L, n, kvh, d)
        parent = chain[-1].key if chain else ROOT_KEY
        key, k = self._best_child(parent, tokens[n:limit])
        if k:  # copy on reuse: the sequence writes its own rows from n + k on
            row = self._index[key].index
            cache.k[:, slot, n:n + k] = self.k[:, row, :k]
            cache.v[:, slot, n:n + k] = self.v[:, row, :k]
            self._touch([b.key for b in chain] + [key])  # parents stay more recent
            n += k
        cache.lengths[slot] = n
        self.queries += len(tokens)
        self.hits += n
        return n

    def _best_child(self, parent: int, tokens: list[int]) -> tuple[int, int]:
        """(key, k): the cached child of ``parent`` whose first ``k`` tokens equal
        ``tokens[:k]`` with the largest ``k`` (k = 0 when none shares a first token)."""
        best = (ROOT_KEY, 0)
        for key in self._children.get(parent, ()):
            have = self._index[key].tokens
            k = next((i for i, (a, b) in enumerate(zip(have, tokens)) if a != b), min(len(have), len(tokens)))
            if k > best[1]:
                best = (key, k)
        return best

    def store(self, cache: KVCache, slot: int, tokens: list[int]) -> int:
        """Retain the blocks of ``tokens`` — the committed tokens of ``slot``, whose KV is in
        rows ``[0, len(tokens))`` — full blocks first, then the last partial block, evicting
        least recently used blocks when the pool is full. Returns the number of blocks
        copied in (blocks already cached are only refreshed). Raises ValueError when the
        slot does not hold that many rows."""
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
                self._insert(_Block(key, index, parent, block_tokens))
                new.append((j, index))
            parent = key
        if new:  # one gather per tensor for every new full block (this runs after each prefill)
            L, _, _, kvh, d = self.k.shape
            src = torch.tensor([j for j, _ in new], device=self.k.device)
            dst = torch.tensor([i for _, i in new], device=self.k.device)
            rows = len(keys) * B
            self.k[:, dst] = cache.k[:, slot, :rows].reshape(L, len(keys), B, kvh, d)[:, src]
            self.v[:, dst] = cache.v[:, slot, :rows].reshape(L, len(keys), B, kvh, d)[:, src]
        tail, stored = tokens[len(keys) * B:], len(new)
        if len(keys) == len(tokens) // B and tail:
            stored += self._store_tail(cache, slot, len(keys) * B, parent, tail, protect)
        self._touch(keys)  # after the tail: each parent ends more recent than its children
        return stored

    def _store_tail(self, cache: KVCache, slot: int, start: int, parent: int, tail: list[int],
                    protect: set[int]) -> int:
        """Retain the partial block ``tail`` (slot rows ``[start, start + len(tail))``, 1..B-1
        tokens after the full blocks ending in ``parent``) unless a cached sibling already
        starts with it; returns the blocks copied in (0 or 1)."""
        key, k = self._best_child(parent, tail)
        if k == len(tail):
            self._touch([key])
            return 0
        index = self._take(protect)
        if index is None:
            return 0
        self._insert(_Block(hash((parent, tuple(tail))), index, parent, tuple(tail)))
        self._copy_in(cache, slot, start, index, len(tail))
        return 1

    def _copy_in(self, cache: KVCache, slot: int, start: int, index: int, rows: int) -> None:
        """Pool block ``index`` rows [0, rows) <- slot rows [start, start + rows)."""
        self.k[:, index, :rows] = cache.k[:, slot, start:start + rows]
        self.v[:, index, :rows] = cache.v[:, slot, start:start + rows]

    def _insert(self, blk: _Block) -> None:
        """Index a block (most recently used); a partial sibling it extends is dropped."""
        siblings = self._children.setdefault(blk.parent, set())
        for key in [k for k in siblings if len(self._index[k].tokens) < len(blk.tokens)
                    and blk.tokens[:len(self._index[k].tokens)] == self._index[k].tokens]:
            self._free.append(self._drop(key))
        self._index[blk.key] = blk
        siblings.add(blk.key)

    def _drop(self, key: int) -> int:
        """Remove a block from the index; returns its pool row (the caller frees or reuses it)."""
        blk = self._index.pop(key)
        self._children.get(blk.parent, set()).discard(key)
        return blk.index

    def clear(self) -> None:
        """Drop every cached block (counters are kept)."""
        self._free.extend(b.index for b in self._index.values())
        self._index.clear()
        self._children.clear()

    def _take(self, protect: set[int]) -> int | None:
        """A free pool row, evicting the least recently used block outside ``protect``."""
        if self._free:
            return self._free.pop()
        victim = next((k for k in self._index if k not in protect), None)
        if victim is None:
            return None
        return self._drop(victim)

    def _touch(self, keys: list[int]) -> None:
        """Mark a chain most recently used, child first, so each parent ends more recent."""
        for key in reversed(keys):
            if key in self._index:
                self._index.move_to_end(key)
