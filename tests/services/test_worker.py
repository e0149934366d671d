"""The worker process's helpers: what its /metrics reports about the kernels it chose at start."""

from types import SimpleNamespace

from common.modeling.attention_probe import AttentionPlan
from common.modeling.kernel_probe import KernelPlan
from services.worker import _kernels


class TestKernels:
    def test_matmul_and_attention_choices_together(self):
        """A built worker reports its matmul kernel choices and its measured attention limits (format "attention") with their probe timings."""
        kernel = KernelPlan({"int4": ((128, "w4a8"),)}, {"int4/8/w4a8": 9.0, "int4/8/int4": 19.0}, "cache")
        attention = AttentionPlan(((1, None), (4, 2048), (8, 0)), {"4/2048/exact": 23.3, "4/2048/sdpa": 25.9})
        chosen, timings = _kernels({"built": SimpleNamespace(kernel_plan=kernel, attention_plan=attention)})
        assert ("int4", 8, "w4a8") in chosen
        assert {c for c in chosen if c[0] == "attention"} == {("attention", 1, "exact"),
                                                              ("attention", 4, "exact_up_to_2048_columns"),
                                                              ("attention", 8, "sdpa")}
        assert timings["int4/8/int4"] == 19.0 and timings["attention/4/sdpa@2048"] == 25.9

    def test_nothing_while_loading_or_unmeasured(self):
        """While the model loads, or with neither plan measured, the worker reports no kernels."""
        assert _kernels({}) == ([], {})
        assert _kernels({"built": SimpleNamespace(kernel_plan=None, attention_plan=None)}) == ([], {})
