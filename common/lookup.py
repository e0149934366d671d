"""Prompt-lookup candidates: free draft tokens copied from the sequence itself.

Summaries, RAG answers and code edits copy long spans of their input. Prompt lookup
decoding (A. Saxena, "Prompt Lookup Decoding", 2023, github.com/apoorvumang/prompt-lookup-decoding;
vLLM's ``ngram`` speculative method, ``vllm/v1/spec_decode/ngram_proposer.py``; llama.cpp's
``lookup`` example) proposes such spans with no model at all: take the last n tokens of
the sequence (prompt + output so far), find an earlier occurrence of that n-gram, and
propose the tokens that followed it. n runs from ``max_ngram`` down to ``min_ngram``; the
longest n-gram that occurs earlier wins (a longer match is a stronger hint).

Here the most recent earlier occurrence gives the main chain (recent context is the
likeliest to be copied next, e.g. the line being edited); with ``branches`` > 1, older
occurrences whose continuation starts with a *different* token give further chains, which
become sibling branches in the token tree. The main model verifies every proposed token,
so a wrong candidate costs one verified tree row and never changes the output.
Pure and torch-free (numpy).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


@dataclass(frozen=True)
class LookupMatch:
    """The candidates of one lookup.

    Attributes:
        ngram: length n of the matched suffix n-gram (``min_ngram <= n <= max_ngram``).
        chains: candidate continuations, each ``<= num_tokens`` token ids; their first
            tokens are distinct; ``chains[0]`` follows the most recent earlier occurrence.
    """

    ngram: int
    chains: list[list[int]]


def check_ngram_range(max_ngram: int, min_ngram: int, num_tokens: int) -> None:
    """Raise ValueError unless ``1 <= min_ngram <= max_ngram`` and ``num_tokens >= 1``."""
    if not 1 <= min_ngram <= max_ngram:
        raise ValueError(f"prompt lookup n-gram range must satisfy 1 <= min ({min_ngram}) <= max ({max_ngram})")
    if num_tokens < 1:
        raise ValueError(f"prompt lookup needs num_tokens >= 1, got {num_tokens}")


def find_candidates(tokens, max_ngram: int, min_ngram: int, num_tokens: int,
                    branches: int = 1) -> LookupMatch | None:
    """Prompt-lookup candidates for the sequence ``tokens`` (module docstring).

    Args:
        tokens: ``[L]`` token ids of the sequence so far (prompt + output), any int sequence.
        max_ngram, min_ngram: the suffix n-gram lengths tried, longest first.
        num_tokens: most tokens per chain.
        branches: most chains (distinct first tokens), newest occurrence first.
    Returns:
        The longest-n match's chains, or None when no suffix n-gram of length
        ``>= min_ngram`` occurs earlier with at least one token after it.
    Raises:
        ValueError: an invalid n-gram range, ``num_tokens < 1`` or ``branches < 1``.
    """
    check_ngram_range(max_ngram, min_ngram, num_tokens)
    if branches < 1:
        raise ValueError(f"branches must be >= 1, got {branches}")
    arr = np.asarray(tokens, dtype=np.int64).reshape(-1)  # [L]
    length = len(arr)
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        # windows start at i = 0 .. L-1-n, so a continuation token arr[i + n] exists
        windows = sliding_window_view(arr[:length - 1], n)  # [L - n, n]
        hits = np.flatnonzero((windows == arr[length - n:]).all(axis=1))
        if hits.size:
            return LookupMatch(ngram=n, chains=_chains(arr, hits[::-1] + n, num_tokens, branches))
    return None


def _chains(arr: np.ndarray, starts: np.ndarray, num_tokens: int, branches: int) -> list[list[int]]:
    """Continuations at ``starts`` (newest first), one per distinct first token."""
    chains, seen = [], set()
    for s in starts:
        first = int(arr[s])
        if first in seen:
            continue
        seen.add(first)
        chains.append(arr[s:s + num_tokens].tolist())
        if len(chains) == branches:
            break
    return chains
