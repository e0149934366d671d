"""Draft/verify overlap: draft round t+1's tree while the verifier scores round t's.

While the verifier scores tree t, the draft worker appends a prefix P of tree t's most
likely path (greedy descent by draft score, cut where the draft's own confidence in the
path drops below ``GUESS_CONFIDENCE``) and drafts a *guess tree* rooted at P's end,
deeper than tree t. When the verifier's answer comes back, with committed tokens
``new`` (accepted path + bonus token):

* hit: ``new`` starts with P and the rest of ``new`` is a path from the guess tree's root.
  The subtree below that path's end is a draft tree conditioned on exactly the committed
  tokens, so round t+1 uses it and skips its draft step (drafting left the critical path);
* miss: the guess is discarded; the draft worker's KV holds the guessed tokens past the
  common prefix, which the next DraftStep's ``prefix_len`` rolls back.

Lossless either way: a draft tree only decides which tokens are *proposed*; acceptance is
the verifier's alone. This is PEARL's "post-verify" (Liu et al. 2024, arXiv 2408.11850,
§3.2) applied to token trees: a short P is likely to be accepted and the guess tree still
covers the accepted path's continuation and the bonus token.

It costs draft compute that is thrown away on a miss and makes draft and verifier run at
the same time, so it pays only when they do not share compute: ``overlap = auto`` turns
it on when every draft worker and every verifier report disjoint accelerators.
Pure and torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from common import wire
from common.config import AUTO
from common.tree import ROOT, TokenTree, children, select_best
from common.tree_budget import TreeBudget

GUESS_CONFIDENCE = 0.5  # keep top-path nodes while the draft's path probability is at least this


def top_path(tree: TokenTree) -> list[int]:
    """Node indices of the most likely root-to-leaf path: from the root, repeatedly the
    child with the highest cumulative draft score (ties: the earlier node). [] if empty."""
    kids = children(tree.parents)
    path, node = [], ROOT
    while kids[node + 1]:
        node = max(kids[node + 1], key=lambda i: (tree.scores[i], -i))
        path.append(node)
    return path


def guess_path(tree: TokenTree) -> list[int]:
    """Token ids of the path to assume accepted: the top path's nodes whose cumulative
    draft probability (exp of the score) is at least GUESS_CONFIDENCE (may be empty)."""
    return [int(tree.tokens[i]) for i in top_path(tree) if tree.scores[i] >= np.log(GUESS_CONFIDENCE)]


def descend(tree: TokenTree, tokens: list[int]) -> int | None:
    """The node reached from the root by following ``tokens`` child by child (ROOT for no
    tokens), or None when some token is not a child of the node before it."""
    kids, node = children(tree.parents), ROOT
    for tok in tokens:
        node = next((i for i in kids[node + 1] if tree.tokens[i] == tok), None)
        if node is None:
            return None
    return node


def subtree_below(tree: TokenTree, top: int) -> TokenTree:
    """The descendants of node ``top``, re-rooted there (its children become depth-1
    nodes; scores are made relative to it)."""
    inside = np.zeros(len(tree), bool)
    inside[top] = True
    for i in range(top + 1, len(tree)):  # topological order: a parent precedes its children
        inside[i] = tree.parents[i] >= 0 and inside[tree.parents[i]]
    keep = np.flatnonzero(inside)[1:]
    remap = {top: ROOT}
    remap.update({int(old): new for new, old in enumerate(keep)})
    parents = [remap[int(tree.parents[o])] for o in keep]
    return TokenTree.build(tree.tokens[keep], parents, tree.scores[keep] - tree.scores[top])


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def overlap_pays(mode: str, drafts: list[tuple[str, ...]], verifiers: list[tuple[str, ...]]) -> bool:
    """Whether to overlap: ``on``/``off`` as told; ``auto`` only when every worker computes
    on accelerators (not ``cpu``) and no draft worker shares one with a verifier.
    ``drafts`` / ``verifiers``: each worker's device ids from its Hello (GPU UUIDs, see
    ``common/modeling/devices.py``)."""
    if mode != AUTO:
        return mode == "on"
    groups = drafts + verifiers
    if not drafts or not verifiers or any(not g or "cpu" in g for g in groups):
        return False
    return not {d for g in drafts for d in g} & {d for g in verifiers for d in g}


@dataclass
class Guess:
    """One sequence's look-ahead: ``base`` committed tokens when sent, ``path`` the token
    ids assumed accepted, ``tree`` the guess tree (None while its step is in flight)."""

    base: int
    path: list[int]
    worker: str
    tree: TokenTree | None = None


@dataclass
class Lookahead:
    """The guesses in flight and their outcome counters (``sent``, ``hits``)."""

    guesses: dict[str, Guess] = field(default_factory=dict)
    pending: dict[str, set[str]] = field(default_factory=dict)  # draft worker key -> seq ids
    deadline: float = 0.0  # time.monotonic() seconds by which pending replies are due
    sent: int = 0
    hits: int = 0

    def busy(self) -> bool:
        """A guess step is still in flight (the next round waits for it: its draft worker
        would run the next DraftStep only after it anyway)."""
        return bool(self.pending)

    def plan(self, seq, tree: TokenTree, budget: TreeBudget, shape: tuple[int, int]) -> wire.DraftSeq | None:
        """The guess-step entry for ``seq`` (whose tree ``tree`` of ``shape`` (size, depth)
        is being verified, drafted by worker ``seq.draft.worker``), or None when there is
        nothing to guess from. Marks the guessed tokens as sent to the draft worker."""
        worker = seq.draft.worker
        if len(tree) == 0 or worker is None:
            return None
        toks, path = seq.tokens, guess_path(tree)
        prefix_len, new = seq.draft_view(min(seq.draft.held, len(toks) - (not path)))  # >= 1 new token
        p = seq.params
        size, depth = budget.guess_shape(*shape)
        entry = wire.DraftSeq(seq_id=seq.request_id, prefix_len=prefix_len, new_tokens=new + path,
                              tree_size=size, max_depth=depth, temperature=p.temperature, top_p=p.top_p,
                              top_k=p.top_k, grammar=p.grammar,
                              output=seq.output + path if p.grammar else [])
        seq.draft.sent(len(toks) + len(path))
        self.guesses[seq.request_id] = Guess(base=len(toks), path=path, worker=worker)
        self.pending.setdefault(worker, set()).add(seq.request_id)
        self.sent += 1
        return entry

    def send(self, number: int, trees: dict[str, wire.Tree], running: dict, workers, budget: TreeBudget,
             shape: tuple[int, int], deadline: float) -> list[tuple[bytes, wire.DraftStep]]:
        """Look-ahead DraftSteps (``guess=True``, round ``number``) for the running sequences
        whose ``trees`` are being verified, one per draft worker (``workers``: the
        WorkerRegistry); ``shape``: this round's (tree size, max depth) within ``budget``."""
        groups: dict[str, list[wire.DraftSeq]] = {}
        for sid, tree in trees.items():
            seq = running.get(sid)
            if seq is None or workers.get(seq.draft.worker) is None or not seq.verifier.worker:
                continue
            entry = self.plan(seq, wire.tree_from_wire(tree), budget, shape)
            if entry is not None:
                groups.setdefault(seq.draft.worker, []).append(entry)
        self.deadline = deadline
        return [(workers.get(k).identity, wire.DraftStep(round=number, seqs=es, guess=True))
                for k, es in groups.items()]

    def on_result(self, worker: str, res: wire.DraftResult) -> list[str]:
        """Store a guess step's trees; returns the ids the worker reported lost (none for
        a reply that is no longer awaited)."""
        if worker not in self.pending:
            return []
        for sid in self.pending.pop(worker):
            g = self.guesses.get(sid)
            if g is not None and sid in res.trees:
                g.tree = wire.tree_from_wire(res.trees[sid])
            else:
                self.guesses.pop(sid, None)
        return list(res.lost)

    def drop_worker(self, worker: str) -> None:
        """A draft worker is gone: forget its guesses (its sequences re-prefill anyway)."""
        self.pending.pop(worker, None)
        for sid in [s for s, g in self.guesses.items() if g.worker == worker]:
            del self.guesses[sid]

    def take(self, seq, size: int) -> wire.Tree | None:
        """Resolve ``seq``'s guess against what was committed since it was sent. Returns the
        hit tree (at most ``size`` nodes) or None; either way rolls the draft placement
        back to the guessed tokens that turned out right."""
        g = self.guesses.pop(seq.request_id, None)
        if g is None:
            return None
        new = seq.tokens[g.base:]  # accepted tokens + bonus (empty if the round was lost)
        agree = common_prefix(g.path, new)
        seq.draft.rolled_back(g.base + agree)
        if g.tree is None or agree < len(g.path) or len(new) <= len(g.path) or size == 0:
            return None
        node = descend(g.tree, new[len(g.path):])
        sub = subtree_below(g.tree, node) if node is not None else None
        if sub is None or len(sub) == 0:
            return None
        self.hits += 1
        return wire.tree_to_wire(select_best(sub, size))

    def discard(self, seq_id: str) -> None:
        """Drop the guess of a sequence that finished or was aborted."""
        self.guesses.pop(seq_id, None)
