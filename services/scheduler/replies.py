"""Validation of what workers send the scheduler, before any of it is used. Pure, torch-free.

A worker's Hello/Heartbeat counts must be within bounds (a negative or huge slot count
would stop admission or overflow placement); a VerifyResult's accepted indices must form a
root-to-leaf path of the tree the scheduler sent, and every token must be inside the
vocabulary; a DraftResult's trees must be well formed, inside the vocabulary and no larger
than asked. Each function returns why the message is invalid (the loop then drops the
peer, never the process), or None.
"""

from __future__ import annotations

import math

from common import wire

MAX_SLOTS = 1 << 16  # KV slots one worker may announce
MAX_LEN = 1 << 22  # tokens per slot
MAX_TOKEN_ID = 1 << 24  # bound on any token id when the vocabulary is not known yet


def hello_problem(msg: wire.Hello) -> str | None:
    """Why a Hello is out of bounds (slot count, length, token ids, cost curve)."""
    if not 0 <= msg.slots_total <= MAX_SLOTS:
        return f"slots_total {msg.slots_total} outside 0..{MAX_SLOTS}"
    if not 0 <= msg.max_len <= MAX_LEN:
        return f"max_len {msg.max_len} outside 0..{MAX_LEN}"
    if not 0 <= msg.vocab_size <= MAX_TOKEN_ID:
        return f"vocab_size {msg.vocab_size} outside 0..{MAX_TOKEN_ID}"
    limit = msg.vocab_size or MAX_TOKEN_ID
    if any(not 0 <= t < limit for t in msg.eos_ids):
        return "eos_ids outside the vocabulary"
    if any(not (t > 0 and math.isfinite(ms) and ms >= 0) for t, ms in msg.cost_ms):
        return "cost_ms holds a non-positive size or a non-finite time"
    return None


def heartbeat_problem(msg: wire.Heartbeat) -> str | None:
    if not (0 <= msg.slots_total <= MAX_SLOTS and 0 <= msg.slots_used <= MAX_SLOTS):
        return f"slot counts {msg.slots_used}/{msg.slots_total} outside 0..{MAX_SLOTS}"
    return None


def _is_path(parents, accepted: list[int]) -> bool:
    """``accepted`` walks from a root child down the tree: each node's parent is the previous one."""
    prev = -1
    for a in accepted:
        if not 0 <= a < len(parents) or int(parents[a]) != prev:
            return False
        prev = a
    return True


def verify_problem(res: wire.VerifyResult, trees: dict[str, wire.Tree], vocab: int) -> str | None:
    """Why a VerifyResult for the tree(s) ``trees`` (seq id -> tree sent) is invalid."""
    limit = vocab or MAX_TOKEN_ID
    for sid, out in res.outs.items():
        tree = trees.get(sid)
        if tree is None:
            continue  # not asked in this round: ignored by the round driver
        try:
            parents = tree.parents.numpy()
        except wire.WireError:
            continue
        if not _is_path(parents, out.accepted):
            return f"accepted indices {out.accepted[:8]} are not a path of the {len(parents)}-node tree of {sid}"
        if not 0 <= out.bonus < limit:
            return f"bonus token {out.bonus} outside the vocabulary"
        if out.logprobs is not None and len(out.logprobs) > len(out.accepted) + 1:
            return "more logprobs than committed tokens"
    return None


def draft_problem(res: wire.DraftResult, sizes: dict[str, int], vocab: int) -> str | None:
    """Why a DraftResult is invalid; ``sizes``: seq id -> the tree size asked for."""
    limit = vocab or MAX_TOKEN_ID
    for sid, tree in res.trees.items():
        try:
            tt = wire.tree_from_wire(tree)
        except wire.WireError as exc:
            return f"tree of {sid} is malformed: {exc}"
        if sid in sizes and len(tt) > sizes[sid]:
            return f"tree of {sid} has {len(tt)} nodes, {sizes[sid]} asked"
        if len(tt) and not (tt.tokens.min() >= 0 and tt.tokens.max() < limit):
            return f"tree of {sid} holds tokens outside the vocabulary"
    return None
