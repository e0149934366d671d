"""Python cost of the tree policy per decode round (choose + the observations a round feeds back), ms.

The cost curves are the w4a8 main's and its draft's start-up curves on the AVX2-only Zen 2 host
(ms of one forward over T tokens); the acceptance table is fed as in tests/scheduler/test_tree_policy.py.
Run from the repository root of each checkout: PYTHONPATH=. .venv/bin/python policy_round_ms.py
"""
import sys
import time

sys.path.insert(0, ".")
from tests.scheduler.test_tree_policy import policy  # noqa: E402
from tests.scheduler.trees import chain_tree  # noqa: E402

VERIFY = ((1, 30.0), (2, 35.0), (4, 54.4), (8, 99.7), (16, 192.9), (32, 386.5), (64, 769.7), (128, 1587.8), (256, 3226.8))
DRAFT = ((1, 9.7), (2, 12.0), (4, 17.0), (8, 31.5), (16, 67.7), (32, 122.6), (64, 238.9), (128, 476.0), (256, 975.8))
p, tree, n = policy(VERIFY, DRAFT), chain_tree(4), 2000
start = time.perf_counter()
for _ in range(n):
    size, _ = p.choose(1, remaining=100)
    p.observe_verify(1, 1 + size, 36.0)
    if size:
        p.observe(tree, [0, 1])
    p.observe_round(bool(size), 2, 40.0)
print(f"policy ms per round: {(time.perf_counter() - start) / n * 1000:.3f}")
