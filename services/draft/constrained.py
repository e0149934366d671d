"""Grammar-constrained tree expansion: children drawn only from grammar-valid tokens.

For each expanded node the grammar state after (committed output + path to the node)
gives the allowed tokens (``common.modeling.grammar``). A token the grammar forces (the
only one allowed: a brace, a key, a quote) becomes the node's single child with
probability 1, whatever the draft's logits say (and even when the draft's reduced LM
head lacks it). Otherwise the draft's logits are masked and renormalised and the top-k
allowed tokens become children. A node where no allowed token is in the draft head gets
no children.

With fast-forward on, the text a grammar forces after a node (llguidance's
``compute_ff_tokens``: braces, keys, quotes, separators) goes in as a chain of nodes with
probability 1 in one go: no draft forward and no tree level per forced token (the draft
forwards the chain together with the next level). The verifier checks them like any node
(arXiv 2604.13519 notes they are almost always accepted).
"""

from __future__ import annotations

import numpy as np
import torch

from common import wire
from common.modeling.grammar import GrammarMasks, forced_token, unpack
from common.modeling.sampling import probs_from_logits
from common.tree import ROOT, path_to
from services.draft.policy import TreeBuilder

FORCED_LOGPROB = 0.0  # log 1: a forced token is always accepted


def constrained_children(grammar: GrammarMasks, head_ids: torch.Tensor | None, builder: TreeBuilder,
                         s: wire.DraftSeq, parents: list[int], lg: torch.Tensor, k: int,
                         fast_forward: bool = False) -> None:
    """Add each parent's allowed children; lg: draft logits ``[len(parents), V or K]``.

    ``fast_forward``: where the grammar forces text after a parent, its tokens become a
    chain below the parent (``TreeBuilder.add_chain``) instead of one drafted level each.
    """
    m = grammar.matcher(s.seq_id, s.grammar, s.output)
    tokens = np.asarray(builder.tokens, np.int64)
    tree_parents = np.asarray(builder.parents, np.int32)
    words = grammar.row_words(m, tokens, tree_parents, [0 if p == ROOT else p + 1 for p in parents])  # [P, W]
    for row, parent in enumerate(parents):
        if fast_forward:
            path = [] if parent == ROOT else [int(tokens[n]) for n in path_to(tree_parents, parent)]
            chain = grammar.fast_forward(m, path, builder.chain_room())
            if chain:
                builder.add_chain(parent, chain)
                continue
        forced = forced_token(words[row])
        if forced is not None:
            builder.add_children(parent, np.array([forced]), np.array([FORCED_LOGPROB]))
            continue
        ok = unpack(words[row:row + 1], grammar.vocab_size)[0]  # [V]
        ok_head = ok if head_ids is None else ok[head_ids]  # [V or K]
        n_ok = int(ok_head.sum())
        if n_ok == 0:
            continue
        scores = lg[row:row + 1].masked_fill(~ok_head, float("-inf"))
        probs = (probs_from_logits(scores, s.temperature, s.top_k, s.top_p) if s.temperature > 0
                 else torch.softmax(scores, dim=-1))
        top = torch.topk(probs[0], min(k, n_ok))
        keep = top.values > 0
        ids = top.indices[keep] if head_ids is None else head_ids[top.indices[keep]]
        builder.add_children(parent, ids.numpy(), torch.log(top.values[keep]).numpy())
