"""The tree budget: the one place that bounds a draft tree's size and depth and the KV rows
reserved for it. Torch-free; the scheduler (what a round asks for), the draft and verifier
workers (KV headroom) and the in-process engine all read it from the same Config.

* ``size``: nodes per tree. ``tree_size`` N forces N (0 = plain decoding); ``auto`` lets
  the policy (``services/scheduler/tree_policy.py``) choose up to ``AUTO_MAX_NODES``.
* ``depth``: levels, at most ``max_accept_length`` and never more than the size.
* ``lookup_nodes``: prompt-lookup nodes (``common/lookup.py``) a round may graft onto a
  sequence's draft tree on top of ``size`` (``prompt_lookup_num_tokens``; 0 when
  ``prompt_lookup`` is off or ``tree_size`` is 0: plain decoding proposes nothing). Lookup
  paths may reach ``max_depth`` even when the round's draft tree is shallower.
* look-ahead (draft/verify overlap) trees: ``GUESS_SIZE_FACTOR`` x the round's size
  (capped at ``MAX_GUESS_SIZE``), ``GUESS_EXTRA_DEPTH`` levels deeper.
* KV headroom past ``max_model_len``: the verifier writes one row per tree node; the draft
  one row per expanded frontier node (at most ``DRAFT_WIDTH`` per level: ``level_width``) plus a
  guessed path, plus grammar-forced chains (at most a tree's size of them).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.config import AUTO, Config

AUTO_DEFAULT_SIZE = 16  # nodes, used until costs and acceptance are measured
AUTO_MAX_NODES = 64  # largest tree "auto" considers
GUESS_SIZE_FACTOR = 2  # a guess tree also covers the accepted tail and several bonus candidates
GUESS_EXTRA_DEPTH = 2  # levels beyond the round's max depth
MAX_GUESS_SIZE = 256  # nodes
DRAFT_WIDTH = 4  # frontier nodes the draft expands per level (DraftRunner's default)
MIN_KV_HEADROOM = 256  # KV rows past max_model_len every worker keeps at least


def level_width(size: int, depth: int, width: int = DRAFT_WIDTH) -> int:
    """Frontier nodes worth expanding at tree depth ``depth`` (>= 1) of a ``size``-node tree: at
    most ``width``, and at most (size - depth + 1) // 2 (at least 1).

    Kept children under w different depth-``depth`` parents need those w children, the w parents
    and at least depth - 1 ancestors among the ``size`` nodes ``select_best`` keeps:
    2w + depth - 1 <= size. Which w nodes: the best-scored (the EAGLE-2 frontier rule, arXiv
    2406.16858 section 4); like any frontier cut it may miss a child that a lower-ranked node would
    have had kept. The rows saved matter where a level pass's cost grows with its rows: on a 2-core
    AVX2 host a w4a8 0.5B draft's pass took 8.8 ms for 1 row and 15.5 ms for 4."""
    return max(1, min(width, (size - depth + 1) // 2))


@dataclass(frozen=True)
class TreeBudget:
    """Bounds on every draft tree of a deployment. ``size`` None = ``auto``."""

    size: int | None
    max_depth: int
    lookup_nodes: int = 0

    def __post_init__(self) -> None:
        if (self.size is not None and self.size < 0) or self.max_depth < 1 or self.lookup_nodes < 0:
            raise ValueError(f"invalid tree budget: size {self.size}, max_depth {self.max_depth}, "
                             f"lookup_nodes {self.lookup_nodes}")

    @classmethod
    def from_config(cls, cfg: Config) -> "TreeBudget":
        """``tree_size`` (``auto`` or nodes), ``max_accept_length`` (levels) and the
        prompt-lookup nodes (``prompt_lookup_num_tokens`` when ``prompt_lookup`` is on)."""
        size = None if cfg.tree_size == AUTO else int(cfg.tree_size)
        lookup = cfg.prompt_lookup_num_tokens if cfg.prompt_lookup and size != 0 else 0
        return cls(size, cfg.max_accept_length, lookup)

    @property
    def auto(self) -> bool:
        return self.size is None

    @property
    def speculative(self) -> bool:
        """False for plain decoding (``tree_size`` 0)."""
        return self.size != 0

    @property
    def max_nodes(self) -> int:
        """Most nodes any round asks the draft model for."""
        return AUTO_MAX_NODES if self.size is None else self.size

    @property
    def max_verify_nodes(self) -> int:
        """Most nodes of a tree sent to the verifier: draft nodes plus grafted lookup nodes."""
        return self.max_nodes + self.lookup_nodes

    def default_shape(self) -> tuple[int, int]:
        """(nodes, depth) before anything is measured; (0, 0) = plain decoding."""
        if self.size is None:
            return AUTO_DEFAULT_SIZE, self.max_depth
        return (0, 0) if self.size == 0 else self.clamp(self.size, self.max_depth)

    def clamp(self, size: int, depth: int) -> tuple[int, int]:
        """(size, depth) cut to the budget; depth never exceeds the size."""
        size = max(0, min(size, self.max_nodes))
        return size, min(depth, self.max_depth, size)

    def guess_shape(self, size: int, depth: int) -> tuple[int, int]:
        """(nodes, depth) of a look-ahead tree drafted for a round of shape (size, depth)."""
        return min(size * GUESS_SIZE_FACTOR, MAX_GUESS_SIZE), depth + GUESS_EXTRA_DEPTH

    @property
    def kv_headroom(self) -> int:
        """KV rows a worker keeps free past ``max_model_len`` for the tree in flight."""
        chains = min(self.max_nodes * GUESS_SIZE_FACTOR, MAX_GUESS_SIZE)
        draft_rows = (self.max_depth + GUESS_EXTRA_DEPTH) * DRAFT_WIDTH + self.max_depth + chains
        return max(MIN_KV_HEADROOM, self.max_verify_nodes, draft_rows)
