"""Tree verification: one batched main-model forward over every sequence's (new committed
tokens + draft tree), one drawn token per tree row, one host transfer, the acceptance
walk, and commit of the accepted path's KV rows."""

from __future__ import annotations

import time

import numpy as np
import torch

from common import wire
from common.modeling.grammar import GrammarMasks, apply_mask
from common.modeling.devices import to_host
from common.modeling.kv_cache import KVCache
from common.modeling.model import DecoderModel
from common.modeling.prefix_cache import PrefixCache
from common.modeling.runner import forward_segments
from common.modeling.sampling import apply_penalties, draw_tokens
from common.modeling.slots import SlotTable
from common.tree import TokenTree, children, depths, path_to
from services.verifier.acceptance import accept_walk
from services.verifier.validate import invalid_reason


class VerifierRunner:
    """Owns the main model and its KV cache; ``step`` answers one VerifyStep."""

    def __init__(self, model: DecoderModel, slots: int, max_len: int,
                 grammar: GrammarMasks | None = None, prefix_blocks: int = 0, block_size: int = 16) -> None:
        self.model = model
        self.cache: KVCache = model.new_cache(slots, max_len)
        prefix = PrefixCache(self.cache, prefix_blocks, block_size) if prefix_blocks > 0 else None
        self.table = SlotTable(self.cache, model.spec.vocab_size, prefix)
        self.grammar = grammar  # constrained decoding (SamplingParams.grammar); None = refused

    def free(self, seq_ids: list[str], keep: bool = True) -> None:
        """Release sequences; ``keep``: retain their KV blocks in the prefix cache."""
        self.table.free(seq_ids, keep)
        if self.grammar is not None:
            self.grammar.free(seq_ids)

    def held(self) -> list[str]:
        """Sequence ids holding a KV slot."""
        return self.table.seq_ids()

    def step(self, msg: wire.VerifyStep) -> wire.VerifyResult:
        """Score all trees in one forward pass, accept, commit. Unknown sequences are lost;
        invalid ones (``validate.invalid_reason``) fail alone; when the batched pass raises,
        every sequence is retried on its own so that only the offender fails."""
        t0 = time.perf_counter()
        served, lost = self.table.resolve(msg.seqs)
        seqs, trees, failed = [], [], {}
        for s in served:
            why = invalid_reason(s, self.model.spec.vocab_size)
            tree = None if why else self._tree(s)
            if why:
                failed[s.seq_id] = why
            elif tree is None or not s.new_tokens:
                lost.append(s.seq_id)
            else:
                seqs.append(s)
                trees.append(tree)
        outs = self._verify_isolated(seqs, trees, failed) if seqs else {}
        self.free(list(failed), keep=False)
        return wire.VerifyResult(round=msg.round, outs=outs, lost=lost, verify_ms=(time.perf_counter() - t0) * 1e3,
                                 failed=failed)

    def _verify_isolated(self, seqs: list[wire.VerifySeq], trees: list[TokenTree],
                         failed: dict[str, str]) -> dict[str, wire.VerifyOut]:
        """``_verify`` of the batch; if it raises, of each sequence alone (nothing was
        committed: ``_verify`` commits only after every acceptance succeeded)."""
        try:
            return self._verify(seqs, trees)
        except Exception as exc:  # isolate the offender; the others must not pay for it
            if len(seqs) == 1:
                failed[seqs[0].seq_id] = f"verification failed: {exc!r}"[:300]
                return {}
        outs: dict[str, wire.VerifyOut] = {}
        for s, tree in zip(seqs, trees):
            try:
                outs.update(self._verify([s], [tree]))
            except Exception as exc:  # this sequence alone fails
                failed[s.seq_id] = f"verification failed: {exc!r}"[:300]
        return outs

    def _tree(self, s: wire.VerifySeq) -> TokenTree | None:
        """The sequence's draft tree, or None when it is malformed or out of vocabulary."""
        try:
            tree = wire.tree_from_wire(s.tree)
        except wire.WireError:
            return None
        in_vocab = len(tree) == 0 or (tree.tokens.min() >= 0 and tree.tokens.max() < self.model.spec.vocab_size)
        rows = self.cache.lengths[self.table.slot(s.seq_id)] + len(s.new_tokens) + len(tree)
        return tree if in_vocab and rows <= self.cache.max_len else None

    def _verify(self, seqs: list[wire.VerifySeq], trees: list[TokenTree]) -> dict[str, wire.VerifyOut]:
        slots = [self.table.slot(s.seq_id) for s in seqs]
        hidden = forward_segments(self.model, self.cache, slots, [s.new_tokens for s in seqs],
                                  [t.tokens for t in trees], [t.parents for t in trees])
        # rows scored: the root (last new token) and every tree node -> [n + 1, H] each
        scored = [h[len(s.new_tokens) - 1:] for h, s in zip(hidden, seqs)]
        logits = self.model.logits(torch.cat(scored))  # [sum(n + 1), V] fp32
        sizes = [len(t) + 1 for t in trees]
        on_device = [self._draw(s, t, lg) for s, t, lg in zip(seqs, trees, logits.split(sizes))]
        host = to_host([x for group in on_device for x in group])  # the step's one transfer
        outs = {}
        for s, tree, group in zip(seqs, trees, on_device):
            drawn, lps = host[0], host[1:len(group)]
            host = host[len(group):]
            accepted, bonus = accept_walk(tree.tokens, children(tree.parents), drawn)
            outs[s.seq_id] = wire.VerifyOut(accepted=accepted, bonus=bonus,
                                            logprobs=token_logprobs(accepted, *lps) if lps else None)
        for s, slot, tree in zip(seqs, slots, trees):  # commit only once every acceptance succeeded
            accepted = outs[s.seq_id].accepted
            base, p = self.cache.lengths[slot], len(s.new_tokens)
            self.cache.commit(slot, list(range(base, base + p)) + [base + p + i for i in accepted])
            self.table.extend(s.seq_id, list(s.new_tokens) + [int(tree.tokens[a]) for a in accepted])
        return outs

    def _draw(self, s: wire.VerifySeq, tree: TokenTree, lg: torch.Tensor) -> list[torch.Tensor]:
        """On the device, for one sequence (``lg``: ``[n + 1, V]`` raw fp32 logits): the
        token drawn at each row ``[n + 1]`` and, when logprobs are asked for, each row's
        log-probability of it ``[n + 1]`` and its top alternatives ``[n + 1, k]`` x 2."""
        prm = s.params
        pen = penalized(lg, prm, tree, s.history)
        scores = self._constrain(s, tree, ban_until_min_tokens(pen, tree, s.banned, s.ban_depth), pen)
        row_depth = np.concatenate([[0], depths(tree.parents)]).astype(np.int64)  # [n + 1]
        root = s.prefix_len + len(s.new_tokens)  # absolute position of the root row's token
        positions = [root + d for d in range(int(row_depth.max()) + 1)]
        drawn = draw_tokens(scores, prm.temperature, prm.top_k, prm.top_p, s.seed, positions,
                            torch.from_numpy(row_depth).to(scores.device))
        if prm.logprobs is None:
            return [drawn]
        lp = torch.log_softmax(lg, dim=-1)  # raw logits, before sampling transforms
        top = torch.topk(lp, prm.logprobs, dim=-1)
        return [drawn, lp.gather(1, drawn[:, None])[:, 0], top.values, top.indices]


    def _constrain(self, s: wire.VerifySeq, tree: TokenTree, scores: torch.Tensor,
                   unbanned: torch.Tensor) -> torch.Tensor:
        """Grammar mask per tree row (``common.modeling.grammar``), before acceptance."""
        if s.params.grammar is None:
            return scores
        if self.grammar is None:
            raise ValueError("this verifier has no tokenizer for grammar-constrained decoding")
        m = self.grammar.matcher(s.seq_id, s.params.grammar, s.history)
        return apply_mask(scores, self.grammar.row_masks(m, tree.tokens, tree.parents), unbanned)


def penalized(lg: torch.Tensor, prm: wire.SamplingParams, tree: TokenTree, history: list[int]) -> torch.Tensor:
    """Apply presence/frequency/repetition penalties row by row: row 0 (root) counts the
    output so far, row 1 + i also counts the path to node i. Returns lg unchanged when off."""
    if not (prm.presence_penalty or prm.frequency_penalty or prm.repetition_penalty != 1.0):
        return lg
    counts = torch.zeros_like(lg)  # [n + 1, V]
    if history:
        counts[:] = torch.bincount(torch.tensor(history), minlength=lg.shape[1])[: lg.shape[1]].float()
    for i in range(len(tree)):
        for node in path_to(tree.parents, i):
            counts[i + 1, int(tree.tokens[node])] += 1
    return apply_penalties(lg, counts, prm.presence_penalty, prm.frequency_penalty, prm.repetition_penalty)


def ban_until_min_tokens(scores: torch.Tensor, tree: TokenTree, banned: list[int], ban_depth: int) -> torch.Tensor:
    """min_tokens (vLLM semantics): EOS / stop ids get -inf logits at rows whose next token
    would still be within the first min_tokens outputs (row depth < ban_depth)."""
    if not banned or ban_depth <= 0:
        return scores
    rows = [0] + [1 + i for i, d in enumerate(depths(tree.parents)) if d < ban_depth]
    out = scores.clone()
    out[torch.tensor(rows)[:, None], torch.tensor(banned)[None, :]] = float("-inf")
    return out


def token_logprobs(accepted: list[int], chosen: np.ndarray, top_values: np.ndarray,
                   top_ids: np.ndarray) -> list[wire.TokenLogprob]:
    """Main-model log-probabilities (raw logits, before sampling transforms) of each
    committed token (accepted tokens then the bonus), with the top alternatives each. The
    committed token at row r is ``drawn[r]`` (the walk accepts a child only when it equals
    its parent row's drawn token), so ``chosen`` holds its log-probability. Host arrays:
    ``chosen`` ``[n + 1]``,
    ``top_values``/``top_ids`` ``[n + 1, k]``."""
    rows = [0] + [1 + a for a in accepted]  # the distribution each token was drawn from
    return [wire.TokenLogprob(logprob=float(chosen[r]),
                              top=[(int(i), float(v)) for i, v in zip(top_ids[r], top_values[r])])
            for r in rows]


__all__ = ["VerifierRunner", "penalized", "token_logprobs"]
