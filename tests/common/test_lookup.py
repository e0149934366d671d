"""Prompt-lookup candidates: the longest suffix n-gram found earlier and what followed it."""

import pytest

from common.lookup import find_candidates


class TestFindCandidates:
    def test_copies_what_followed_the_ngram(self):
        """The suffix [7, 8] occurred before, followed by 9, 10, 11: those are proposed."""
        m = find_candidates([7, 8, 9, 10, 11, 5, 7, 8], max_ngram=3, min_ngram=1, num_tokens=3)
        assert m.ngram == 2 and m.chains == [[9, 10, 11]]

    def test_longest_ngram_wins(self):
        """A 3-gram match is preferred over a more recent 1-gram match."""
        toks = [1, 2, 3, 40, 41, 9, 3, 50, 1, 2, 3]
        m = find_candidates(toks, max_ngram=3, min_ngram=1, num_tokens=2)
        assert m.ngram == 3 and m.chains == [[40, 41]]

    def test_most_recent_occurrence_first(self):
        """Of two earlier occurrences the newest gives the main chain, the older (a
        different next token) a branch."""
        toks = [5, 6, 100, 101, 5, 6, 200, 201, 5, 6]
        m = find_candidates(toks, max_ngram=2, min_ngram=2, num_tokens=2, branches=2)
        assert m.chains == [[200, 201], [100, 101]]

    def test_branches_have_distinct_first_tokens(self):
        """Occurrences continuing with the same token give one chain, not two."""
        toks = [5, 6, 100, 1, 5, 6, 100, 2, 5, 6]
        m = find_candidates(toks, max_ngram=2, min_ngram=2, num_tokens=2, branches=3)
        assert m.chains == [[100, 2]]

    def test_chain_cut_at_num_tokens_and_sequence_end(self):
        """A chain has at most num_tokens tokens and never runs past the sequence."""
        toks = [1, 2, 3, 4, 5, 6, 1, 2]
        assert find_candidates(toks, 2, 2, num_tokens=3).chains == [[3, 4, 5]]
        assert find_candidates([4, 4, 4], 2, 1, num_tokens=5).chains == [[4]]  # overlapping match

    def test_no_match(self):
        """No earlier occurrence of any suffix n-gram >= min_ngram: None."""
        assert find_candidates([1, 2, 3, 4], 3, 1, 4) is None
        assert find_candidates([1, 2, 9, 1, 2], 3, 3, 4) is None  # only a 2-gram repeats
        assert find_candidates([], 3, 1, 4) is None
        assert find_candidates([7], 3, 1, 4) is None

    @pytest.mark.parametrize("args", [(2, 3, 4), (3, 0, 4), (3, 1, 0)])
    def test_invalid_range(self, args):
        """min_ngram above max_ngram, below 1, or num_tokens < 1 is refused."""
        with pytest.raises(ValueError):
            find_candidates([1, 2, 1, 2], *args)
