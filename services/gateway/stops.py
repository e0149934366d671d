"""Stop strings matched across chunk boundaries.

Text arrives in arbitrary chunks; a stop string may straddle two of them. The matcher
holds back the longest suffix of the pending text that could still begin a stop string,
and on a match returns the text before it (the stop string itself is not returned).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StopResult:
    text: str  # safe to emit now
    stopped: bool  # a stop string matched; ``text`` ends right before it
    stop: str = ""  # the stop string that matched


class StopMatcher:
    """Finds the first occurrence of any stop string in a stream of text chunks."""

    def __init__(self, stops: list[str]):
        self._stops = [s for s in stops if s]
        self._pending = ""

    def push(self, chunk: str) -> StopResult:
        """Add a chunk; return what can be emitted and whether a stop string matched."""
        if not self._stops:
            return StopResult(chunk, False)
        self._pending += chunk
        hit = self._first_match()
        if hit is not None:
            at, stop = hit
            text, self._pending = self._pending[:at], ""
            return StopResult(text, True, stop)
        keep = self._partial_suffix_len()
        cut = len(self._pending) - keep
        text, self._pending = self._pending[:cut], self._pending[cut:]
        return StopResult(text, False)

    def flush(self) -> str:
        """The held-back text, at the end of the output (no stop string followed)."""
        text, self._pending = self._pending, ""
        return text

    def _first_match(self) -> tuple[int, str] | None:
        """(position, stop string) of the earliest match; the shortest stop on a tie."""
        found = [(i, len(s), s) for s, i in ((s, self._pending.find(s)) for s in self._stops) if i >= 0]
        return (min(found)[0], min(found)[2]) if found else None

    def _partial_suffix_len(self) -> int:
        """Length of the longest suffix of the pending text that is a proper prefix of a stop."""
        best = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(self._pending)), best, -1):
                if self._pending.endswith(stop[:n]):
                    best = n
                    break
        return best
