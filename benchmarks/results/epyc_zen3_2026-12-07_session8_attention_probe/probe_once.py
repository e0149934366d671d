"""Load the pair as a worker does (attention probe at start, fresh under a new cache key) and print the plans."""
import json, time
from common.config import load_config
from common.host import cpu_model
from common.modeling.build import load_pair
t = time.perf_counter()
main, draft, _ = load_pair(load_config(None, {}))
print("cpu", cpu_model(), "load s", round(time.perf_counter() - t, 1))
for name, m in (("main", main), ("draft", draft)):
    p = m.attention_plan
    print(name, p.source, p.probe_s, p.limits)
    print(json.dumps(p.timings))
