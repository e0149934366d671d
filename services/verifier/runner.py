"""Tree verification: one batched main-model forward over every sequence's (new committed
tokens + draft tree), acceptance, and commit of the accepted path's KV rows."""

from __future__ import annotations

import time

import torch

from common import wire
from common.modeling.kv_cache import KVCache
from common.modeling.model import DecoderModel
from common.modeling.runner import forward_segments
from common.modeling.sampling import apply_penalties, greedy, probs_from_logits
from common.modeling.slots import SlotTable
from common.tree import TokenTree, children, depths, path_to
from services.verifier.acceptance import greedy_accept, sample_accept
from services.verifier.validate import invalid_reason


class VerifierRunner:
    """Owns the main model and its KV cache; ``step`` answers one VerifyStep."""

    def __init__(self, model: DecoderModel, slots: int, max_len: int) -> None:
        self.model = model
        self.cache: KVCache = model.new_cache(slots, max_len)
        self.table = SlotTable(self.cache, model.spec.vocab_size)

    def free(self, seq_ids: list[str]) -> None:
        self.table.free(seq_ids)

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
        self.free(list(failed))
        return wire.VerifyResult(msg.round, outs, lost, (time.perf_counter() - t0) * 1e3, failed)

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
        outs, offset = {}, 0
        for s, tree in zip(seqs, trees):
            outs[s.seq_id] = self._accept(s, tree, logits[offset:offset + len(tree) + 1])
            offset += len(tree) + 1
        for s, slot in zip(seqs, slots):  # commit only once every acceptance succeeded
            base, p = self.cache.lengths[slot], len(s.new_tokens)
            self.cache.commit(slot, list(range(base, base + p)) + [base + p + i for i in outs[s.seq_id].accepted])
        return outs

    def _accept(self, s: wire.VerifySeq, tree: TokenTree, lg: torch.Tensor) -> wire.VerifyOut:
        """Acceptance for one sequence; lg: ``[n + 1, V]`` raw fp32 logits."""
        prm = s.params
        kids = children(tree.parents)
        scores = ban_until_min_tokens(penalized(lg, prm, tree, s.history), tree, s.banned, s.ban_depth)
        if prm.temperature <= 0:
            accepted, bonus = greedy_accept(tree.tokens, kids, greedy(scores).numpy())
        else:
            probs = probs_from_logits(scores, prm.temperature, prm.top_k, prm.top_p)
            gen = torch.Generator().manual_seed(s.seed)
            accepted, bonus = sample_accept(tree.tokens, kids, probs, gen)
        lps = token_logprobs(lg, tree, accepted, bonus, prm.logprobs) if prm.logprobs is not None else None
        return wire.VerifyOut(accepted, bonus, lps)


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


def token_logprobs(lg: torch.Tensor, tree: TokenTree, accepted: list[int], bonus: int,
                   top: int) -> list[wire.TokenLogprob]:
    """Main-model log-probabilities (raw logits, before sampling transforms) of each
    committed token (accepted tokens then the bonus), with ``top`` alternatives each."""
    rows = [0] + [1 + a for a in accepted]  # the distribution each token was drawn from
    toks = [int(tree.tokens[a]) for a in accepted] + [bonus]
    lp = torch.log_softmax(lg[rows], dim=-1)  # [k + 1, V]
    out = []
    for r, t in enumerate(toks):
        alts = []
        if top:
            v, i = torch.topk(lp[r], top)
            alts = [(int(a), float(b)) for a, b in zip(i.tolist(), v.tolist())]
        out.append(wire.TokenLogprob(float(lp[r, t]), alts))
    return out


__all__ = ["VerifierRunner", "penalized", "token_logprobs"]
