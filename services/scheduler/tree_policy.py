"""How big a draft tree to ask for: the single place that decides tree size and depth.

``tree_size`` N in the config forces N nodes; 0 turns speculation off; ``auto`` picks the
shape from measurements (see ``choose_tree``). Torch-free.
"""

from __future__ import annotations

from common.config import AUTO, Config

AUTO_DEFAULT_SIZE = 16  # nodes, used until a measured cost curve is available


def static_tree(cfg: Config) -> tuple[int, int]:
    """(tree_size, max_depth) from the config alone."""
    size = AUTO_DEFAULT_SIZE if cfg.tree_size == AUTO else int(cfg.tree_size)
    return size, cfg.max_accept_length


def choose_tree(cfg: Config, batch_size: int) -> tuple[int, int]:
    """(tree_size, max_depth) for a round over ``batch_size`` running sequences."""
    return static_tree(cfg)
