"""The main model's verify cost curve (ms of one pass over T tokens) measured at start, old order (each size's runs
together) and new (runs take turns over the grid), alternately 3 times each in one process.
PYTHONPATH=<tree> python curve_ab.py OLD_RUNNER.py"""
import importlib.util
import json
import sys

from common.config import load_config
from common.host import cpu_model
from common.modeling import runner as new
from common.modeling.build import load_pair

spec = importlib.util.spec_from_file_location("old_runner", sys.argv[1])
old = importlib.util.module_from_spec(spec)
sys.modules["old_runner"] = old
spec.loader.exec_module(old)
main, _, _ = load_pair(load_config(None, {}), with_draft=False)
print("cpu", cpu_model(), flush=True)
out = {"old": [], "new": []}
for i in range(3):
    for arm, mod in (("old", old), ("new", new)):
        curve = mod.measure_forward_ms(main, main.new_cache(1, 64 + 256 + 1))
        out[arm].append(curve)
        print(arm, i, [(t, round(ms, 1)) for t, ms in curve], flush=True)
print(json.dumps(out))
