"""Draft model execution: append committed tokens, then expand token trees level by level.

One forward pass per tree level covers the frontier nodes of every sequence in the batch.
The draft's KV keeps only committed tokens between rounds: tree rows written while
drafting are dropped at the end of the step (``truncate``), and the next step appends
the tokens the verifier committed (accepted path + bonus token).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from common import wire
from common.modeling.grammar import GrammarMasks
from common.modeling.devices import to_host
from common.modeling.kv_cache import KVCache
from common.modeling.model import DecoderModel
from common.modeling.prefix_cache import PrefixCache
from common.modeling.runner import forward_segments
from common.modeling.sampling import probs_from_logits
from common.tree import ROOT
from services.draft.constrained import constrained_children
from services.draft.policy import TreeBuilder, TreeShape
from common.modeling.slots import SlotTable

EMPTY_I64 = np.zeros(0, np.int64)
EMPTY_I32 = np.zeros(0, np.int32)


class DraftRunner:
    """Owns the draft model and its KV cache; ``step`` answers one DraftStep."""

    def __init__(self, model: DecoderModel, slots: int, max_len: int, topk: int = 4,
                 width: int = 4, min_path_prob: float = 0.02, grammar: GrammarMasks | None = None,
                 prefix_blocks: int = 0, block_size: int = 16, fast_forward: bool = True) -> None:
        self.model = model
        self.cache: KVCache = model.new_cache(slots, max_len)
        prefix = PrefixCache(self.cache, prefix_blocks, block_size) if prefix_blocks > 0 else None
        self.table = SlotTable(self.cache, model.spec.vocab_size, prefix)
        self.topk, self.width, self.min_path_prob = topk, width, min_path_prob
        self.grammar = grammar  # propose only grammar-valid tokens (None: unconstrained drafts)
        self.fast_forward = fast_forward  # grammar-forced text goes into trees without drafting

    def step(self, msg: wire.DraftStep) -> wire.DraftResult:
        """Draft one tree per sequence; sequences whose KV is missing are reported lost."""
        t0 = time.perf_counter()
        seqs, lost = self.table.resolve(msg.seqs)
        trees = self._draft(seqs) if seqs else {}
        ms = (time.perf_counter() - t0) * 1e3
        return wire.DraftResult(round=msg.round, trees={k: wire.tree_to_wire(t) for k, t in trees.items()},
                                lost=lost, draft_ms=ms,
                                guess=msg.guess)

    def free(self, seq_ids: list[str], keep: bool = True) -> None:
        """Release sequences; ``keep``: retain their KV blocks in the prefix cache."""
        self.table.free(seq_ids, keep)
        if self.grammar is not None:
            self.grammar.free(seq_ids)

    def held(self) -> list[str]:
        """Sequence ids holding a KV slot."""
        return self.table.seq_ids()

    def _draft(self, seqs: list[wire.DraftSeq]) -> dict:
        slots = [self.table.slot(s.seq_id) for s in seqs]
        hidden = forward_segments(self.model, self.cache, slots, [s.new_tokens for s in seqs],
                                  [EMPTY_I64] * len(seqs), [EMPTY_I32] * len(seqs))
        for s, slot in zip(seqs, slots):
            base = self.cache.lengths[slot]
            self.cache.commit(slot, list(range(base, base + len(s.new_tokens))))
            self.table.extend(s.seq_id, s.new_tokens)
        builders = [TreeBuilder(TreeShape(s.tree_size, s.max_depth, self.topk, self.width, self.min_path_prob))
                    for s in seqs]
        self._expand(builders, seqs, [[ROOT] for _ in seqs], [h[-1:] for h in hidden])
        committed = [self.cache.lengths[s] for s in slots]
        rows: list[dict[int, int]] = [{} for _ in seqs]
        frontiers = [b.next_frontier() for b in builders]
        while any(frontiers):
            live = [i for i, f in enumerate(frontiers) if f]
            hid = self._level([slots[i] for i in live], [builders[i] for i in live],
                              [rows[i] for i in live], [frontiers[i] for i in live], [committed[i] for i in live])
            self._expand([builders[i] for i in live], [seqs[i] for i in live],
                         [frontiers[i] for i in live], hid)
            frontiers = [b.next_frontier() if i in live else [] for i, b in enumerate(builders)]
        for slot, length in zip(slots, committed):
            self.cache.truncate(slot, length)
        return {s.seq_id: b.result() for s, b in zip(seqs, builders)}

    def _expand(self, builders, seqs, parents_per_seq, hidden) -> None:
        """Add the top-k children of each expanded node from its draft logits (one host
        transfer for the whole level)."""
        logits = self.model.logits(torch.cat(hidden))  # [sum nodes, K or V]
        sizes = [len(p) for p in parents_per_seq]
        tops, plain = [], []
        for b, s, parents, lg in zip(builders, seqs, parents_per_seq, logits.split(sizes)):
            k = min(self.topk, s.tree_size) or 1
            if s.grammar is not None and self.grammar is not None:
                constrained_children(self.grammar, self.model.head_ids, b, s, parents, lg, k, self.fast_forward)
                continue
            probs = (probs_from_logits(lg, s.temperature, s.top_k, s.top_p) if s.temperature > 0
                     else torch.softmax(lg, dim=-1))
            top = torch.topk(probs, k, dim=-1)  # [nodes, k]
            ids = top.indices if self.model.head_ids is None else self.model.head_ids[top.indices]
            tops += [ids, torch.log(top.values.clamp_min(1e-30))]
            plain.append((b, parents))
        host = to_host(tops)
        for i, (b, parents) in enumerate(plain):
            ids, logp = host[2 * i], host[2 * i + 1]
            for row, parent in enumerate(parents):
                b.add_children(parent, ids[row], logp[row])

    def _level(self, slots, builders, rows, frontiers, committed) -> list[torch.Tensor]:
        """Forward the frontier nodes of each sequence, with any ancestors not forwarded yet
        (a grammar-forced chain); each row sees the committed prefix and its ancestors.
        Returns hidden ``[len(frontier), H]`` per sequence (frontier rows only)."""
        todo = [_with_new_ancestors(bld, row_of, front) for bld, row_of, front in zip(builders, rows, frontiers)]
        T = max(len(t) for t in todo)
        S = max(self.cache.lengths[s] + T for s in slots)
        B = len(slots)
        tok = np.zeros((B, T), np.int64)
        pos = np.zeros((B, T), np.int64)
        mask = np.zeros((B, 1, T, S), bool)
        mask[:, 0, :, 0] = True
        for b, (slot, bld, row_of, nodes) in enumerate(zip(slots, builders, rows, todo)):
            start = self.cache.lengths[slot]
            for r, node in enumerate(nodes):
                tok[b, r] = bld.tokens[node]
                pos[b, r] = committed[b] - 1 + bld.depth[node]
                mask[b, 0, r, :committed[b]] = True
                anc = bld.parents[node]
                while anc != ROOT:
                    mask[b, 0, r, row_of[anc]] = True
                    anc = bld.parents[anc]
                mask[b, 0, r, start + r] = True
                row_of[node] = start + r
        for s, nodes in zip(slots, todo):
            self.cache.check_room(s, len(nodes))
        dev = self.model.device
        first = all(self.cache.lengths[s] == c for s, c in zip(slots, committed))  # no earlier level cached
        h = self.model.forward(torch.from_numpy(tok).to(dev), torch.from_numpy(pos).to(dev), self.cache, slots,
                               torch.from_numpy(mask).to(dev), [len(nodes) for nodes in todo], prefix_run=first)
        for b, (slot, nodes) in enumerate(zip(slots, todo)):
            self.cache.lengths[slot] += len(nodes)  # keep tree rows until the step ends
        return [h[b, len(nodes) - len(f):len(nodes)] for b, (nodes, f) in enumerate(zip(todo, frontiers))]


def _with_new_ancestors(bld: TreeBuilder, row_of: dict[int, int], front: list[int]) -> list[int]:
    """The frontier's not-yet-forwarded ancestors (parents before children), then the
    frontier itself, in order (frontier nodes last, so their rows are the final ones)."""
    new: set[int] = set()
    for node in front:
        anc = bld.parents[node]
        while anc != ROOT and anc not in row_of and anc not in new:
            new.add(anc)
            anc = bld.parents[anc]
    return sorted(new) + list(front)
