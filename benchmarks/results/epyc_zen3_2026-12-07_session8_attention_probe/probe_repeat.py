"""The attention probe, uncached, 3 times per model in one process, old (whole passes) and new (attention alone)
taking turns: limits and probe seconds each time.  PYTHONPATH=<tree> python probe_repeat.py OLD_PROBE.py"""
import importlib.util
import sys

from common.config import load_config
from common.host import cpu_model
from common.modeling import attention_probe as new
from common.modeling.build import load_pair

spec = importlib.util.spec_from_file_location("old_probe", sys.argv[1])
old = importlib.util.module_from_spec(spec)
sys.modules["old_probe"] = old
spec.loader.exec_module(old)
main, draft, _ = load_pair(load_config(None, {}))
print("cpu", cpu_model())
for name, m, rows in (("main", main, (1, 4, 8, 16, 32)), ("draft", draft, (1, 4, 8))):
    built = m.exact_limits
    for i in range(3):
        for arm, mod in (("old", old), ("new", new)):
            m.exact_limits = ((64, 512),)  # the probe needs limits set; it restores them
            p = mod.measure(m, rows, None)
            print(name, arm, i, p.source, p.probe_s, p.limits, flush=True)
    m.exact_limits = built
