"""Does draft/verify overlap pay on this machine? (issue 7, item 2)

Overlap would run the draft of tree t+1 while the verifier scores tree t. It can only help
if the two forward passes, run at the same time, finish sooner than one after the other.
This probe times a realistic pair (a verification pass over 17 tokens of the main model
and 8 draft level passes over 4 frontier nodes) sequentially and in two threads.

Usage: .venv/bin/python scripts/overlap_probe.py   (prints JSON: ms and the verdict)
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.config import load_config  # noqa: E402
from common.modeling.build import load_pair  # noqa: E402
from common.modeling.runner import forward_segments  # noqa: E402

REPS = 5
DRAFT_LEVELS = 8


def chain(n: int):
    return np.arange(1, n + 1, dtype=np.int64), np.arange(-1, n - 1, dtype=np.int32)


def main() -> int:
    cfg = load_config(None, {})
    main_model, draft, _ = load_pair(cfg)
    mcache, dcache = main_model.new_cache(1, 1024), draft.new_cache(1, 1024)
    ms, ds = mcache.allocate(), dcache.allocate()
    prefix = list(range(1000, 1300))
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int32))
    for model, cache, slot in ((main_model, mcache, ms), (draft, dcache, ds)):
        forward_segments(model, cache, [slot], [prefix], [empty[0]], [empty[1]])
        cache.commit(slot, list(range(len(prefix))))
    vt, dt = chain(16), chain(3)

    def verify():
        forward_segments(main_model, mcache, [ms], [[5]], [vt[0]], [vt[1]])

    def draft_levels():
        for _ in range(DRAFT_LEVELS):
            forward_segments(draft, dcache, [ds], [[5]], [dt[0]], [dt[1]])

    def timed(fn) -> float:
        fn()
        t0 = time.perf_counter()
        for _ in range(REPS):
            fn()
        return (time.perf_counter() - t0) / REPS * 1e3

    def both():
        th = threading.Thread(target=draft_levels)
        th.start()
        verify()
        th.join()

    v, d, c = timed(verify), timed(draft_levels), timed(both)
    print(json.dumps({"verify_ms": v, "draft_ms": d, "sequential_ms": v + d, "overlapped_ms": c,
                      "overlap_pays": c < 0.9 * (v + d)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
