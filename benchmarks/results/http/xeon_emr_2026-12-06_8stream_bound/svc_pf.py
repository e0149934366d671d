"""POST N single requests (max_tokens 1) of one long prompt to the running gateway; print wall s."""
import json, sys, time, urllib.request
from treespec.bench_data import load_prompts
p = [q for q in load_prompts('spec_bench', 10000) if q.category == 'rag'][int(sys.argv[2]) if len(sys.argv) > 2 else 0]
text = p.text
for i in range(int(sys.argv[1])):
    body = json.dumps({"model": "treespec", "prompt": text + f" ({i})", "max_tokens": 1}).encode()
    t = time.perf_counter()
    r = urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:8000/v1/completions", body, {"Content-Type": "application/json"}))
    out = json.loads(r.read())
    print(i, round(time.perf_counter() - t, 3), out.get('usage'), flush=True)
