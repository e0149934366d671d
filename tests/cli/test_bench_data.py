"""Benchmark prompt sets: Spec-Bench category filters (one or several categories)."""

import pytest

from treespec.bench_data import load_prompts


class TestSpecBenchCategories:
    def test_several_categories_spread_the_limit(self):
        """spec_bench:summarization,rag with limit 4 gives two prompts of each category."""
        prompts = load_prompts("spec_bench:summarization,rag", 4)
        assert [p.category for p in prompts] == ["summarization"] * 2 + ["rag"] * 2

    def test_one_category(self):
        """A single category keeps only its prompts, cut at the limit."""
        prompts = load_prompts("spec_bench:rag", 3)
        assert len(prompts) == 3 and {p.category for p in prompts} == {"rag"}

    def test_unknown_category_named(self):
        """An unknown category in the list is a ValueError naming it."""
        with pytest.raises(ValueError, match="poetry"):
            load_prompts("spec_bench:rag,poetry", 2)
