"""OutputLengths: the expected rest of a running request from finished requests' lengths."""

from services.scheduler.lengths import OutputLengths


class TestOutputLengths:
    def test_nothing_learned_gives_the_cap(self):
        """Before any request finished, the estimate is the request's own budget (max_tokens - generated)."""
        assert OutputLengths().remaining(10, 118) == 118.0

    def test_mean_residual_of_the_longer_finished_requests(self):
        """With finished lengths 20, 30, 40, 50, 100, a request at 25 tokens expects mean(5, 15, 25, 75) = 30 more."""
        lengths = OutputLengths(min_survivors=4)
        for n in (20, 30, 40, 50, 100):
            lengths.observe(n)
        assert lengths.remaining(25, 500) == 30.0

    def test_capped_by_the_requests_own_budget(self):
        """A long typical answer never raises the estimate above what this request may still generate."""
        lengths = OutputLengths(min_survivors=1)
        lengths.observe(400)
        assert lengths.remaining(0, 64) == 64.0 and lengths.remaining(10, -3) == 0.0

    def test_a_request_longer_than_the_seen_ones_falls_back_to_the_cap(self):
        """Fewer than min_survivors finished requests ran past n: the estimate returns to the cap, not to 0."""
        lengths = OutputLengths(min_survivors=2)
        for n in (10, 12, 200):
            lengths.observe(n)
        assert lengths.remaining(50, 300) == 300.0 and lengths.remaining(5, 300) == (5 + 7 + 195) / 3

    def test_window_forgets_old_requests(self):
        """Only the last ``window`` finished lengths count: a workload that changed is learned again."""
        lengths = OutputLengths(window=2, min_survivors=2)
        for n in (500, 500, 20, 20):
            lengths.observe(n)
        assert lengths.remaining(0, 1000) == 20.0
