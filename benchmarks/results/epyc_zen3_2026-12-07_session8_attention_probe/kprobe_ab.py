"""The kernel probe with and without dropping kernels that fall further behind (new vs old module), uncached, taking
turns twice per model in one process: seconds and ladders.  PYTHONPATH=<tree> python kprobe_ab.py OLD_PROBE.py"""
import importlib.util
import sys

from common.config import load_config
from common.host import cpu_model
from common.modeling import kernel_probe as new
from common.modeling import build
from common.modeling.build import draft_model, main_model

spec = importlib.util.spec_from_file_location("old_kernel_probe", sys.argv[1])
old = importlib.util.module_from_spec(spec)
sys.modules["old_kernel_probe"] = old
spec.loader.exec_module(old)
build.install_kernels = build.install_attention = lambda *a, **k: None  # raw weights: the probes run below
cfg = load_config(None, {})
print("cpu", cpu_model(), flush=True)
for name, (m, _) in (("main", main_model(cfg)), ("draft", draft_model(cfg))):
    for i in range(2):
        for arm, mod in (("old", old), ("new", new)):
            p = mod.make_plan(m.w, m.head_weight, m.spec.num_layers, None)
            print(name, arm, i, p.source, p.probe_s, p.ladders, len(p.timings), "timings", flush=True)
