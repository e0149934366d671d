"""One request, then 7 more 50 ms later (chat completions, streamed, max_tokens 32), against a running gateway;
prints each request's time to first token (ms). The scheduler's round log shows what the round that prefills the 7 drafted."""
import json, sys, threading, time, urllib.request
from treespec.bench_data import load_prompts
prompts = load_prompts('humaneval', 8)
ttft = {}
def go(i):
    body = json.dumps({"model": "treespec", "stream": True, "max_tokens": 32,
                       "messages": [{"role": "user", "content": prompts[i].text}]}).encode()
    t = time.perf_counter()
    r = urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:8000/v1/chat/completions", body,
                                                      {"Content-Type": "application/json"}))
    for line in r:
        if line.startswith(b"data: {") and i not in ttft and b'"content"' in line:
            ttft[i] = round((time.perf_counter() - t) * 1e3)
    r.close()
for rep in range(int(sys.argv[1]) if len(sys.argv) > 1 else 2):
    ttft.clear()
    threads = [threading.Thread(target=go, args=(0,))]
    threads[0].start(); time.sleep(0.05)
    threads += [threading.Thread(target=go, args=(i,)) for i in range(1, 8)]
    for t in threads[1:]: t.start()
    for t in threads: t.join()
    print("ttft ms", [ttft.get(i) for i in range(8)], flush=True)
