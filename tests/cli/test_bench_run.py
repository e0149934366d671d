"""treespec/bench_run.py: classifying greedy divergences between plain and speculative runs."""

from treespec.bench_run import TIE_TOLERANCE, Run, divergence


def run(tokens, gaps=()):
    return Run(list(tokens), 1.0, 0.1, gaps=list(gaps))


class TestDivergence:
    def test_identical_outputs_have_no_divergence(self):
        """Equal token lists are not a divergence."""
        assert divergence(run([1, 2, 3]), run([1, 2, 3]), "bfloat16") is None

    def test_gap_at_the_first_difference_classifies_it(self):
        """The gap run's top-1/top-2 gap at the first differing position decides tie vs not a tie."""
        plain, spec = run([1, 2, 3, 4]), run([1, 2, 9, 4])
        small, large = TIE_TOLERANCE["bfloat16"] / 2, 10.375
        tie = divergence(plain, spec, "bfloat16", run([1, 2, 3, 4], [5.0, 5.0, small, 5.0]))
        real = divergence(plain, spec, "bfloat16", run([1, 2, 3, 4], [0.0, 0.0, large, 0.0]))
        assert tie == {"position": 2, "gap": small, "tie": True}
        assert real == {"position": 2, "gap": large, "tie": False}

    def test_gap_run_on_another_trajectory_leaves_it_unclassified(self):
        """A gap re-run whose tokens left plain's at or before the divergence gives no gap: tie is None."""
        plain, spec = run([1, 2, 3, 4]), run([1, 2, 3, 7])
        gap_run = run([1, 8, 3, 4], [0.0, 0.1, 10.0, 10.0])
        assert divergence(plain, spec, "bfloat16", gap_run) == {"position": 3, "gap": None, "tie": None,
                                                               "gap_run_differs_at": 1}
        short = run([1, 2], [0.0, 0.0])  # stopped before the divergence
        assert divergence(plain, spec, "bfloat16", short)["gap_run_differs_at"] == 2

    def test_without_a_gap_run_plain_gives_the_gaps(self):
        """With no gap run the plain run's own gaps are read; a spec output that only ends early counts at its end."""
        plain = run([1, 2, 3], [1.0, 2.0, 0.25])
        assert divergence(plain, run([1, 2]), "bfloat16") == {"position": 2, "gap": 0.25, "tie": True}
