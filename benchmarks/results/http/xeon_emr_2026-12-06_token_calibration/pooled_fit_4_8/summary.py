"""One line per `LEVELS=4,8` run in this folder: the 4- and 8-stream ratios, TTFT p50, the tree waves' verify steps
per 128-token request (min-max, requests), the batch-4 shapes chosen and the modelled plain rounds at batch 8. python3 summary.py"""
import collections, glob, gzip, json, os, re
here = os.path.dirname(os.path.abspath(__file__))
for f in sorted(glob.glob(os.path.join(here, "*.json")), key=lambda f: int(re.search(r"f(\d+)_", f).group(1))):
    levels = {(c["concurrency"], c["mode"]): c for c in json.load(open(f))["concurrency"]}
    ev = [json.loads(l) for l in gzip.open(f[:-5] + ".scheduler.log.gz", "rt") if l.startswith("{")]
    steps = [e["verify_steps"] for e in ev if e["event"] == "finished" and e.get("output_tokens") == 128]
    shapes4 = collections.Counter((e["tree_size"], e["max_depth"]) for e in ev if e["event"] == "tree shape" and e["batch"] == 4)
    plain8 = sum(1 for e in ev if e["event"] == "tree shape" and e["batch"] == 8 and not e["tree_size"] and e["reason"].startswith("max"))
    tree_waves, run = [], []  # runs of requests that speculated (fewer than 128 steps), in finishing order
    for n in steps + [128]:
        if n < 128:
            run.append(n)
        elif run:
            tree_waves, run = tree_waves + [run], []
    print(f"{os.path.basename(f)[:-5]:12s} 4 streams {levels[(4, 'http')]['speedup_vs_plain']:.2f}x  8 streams "
          f"{levels[(8, 'http')]['speedup_vs_plain']:.2f}x  TTFT p50 (4) {levels[(4, 'http-plain')]['ttft_p50_ms']:.0f} / "
          f"{levels[(4, 'http')]['ttft_p50_ms']:.0f} ms  tree-wave steps {' '.join('%d-%d (%d)' % (min(w), max(w), len(w)) for w in tree_waves)}  "
          f"batch-4 shapes {dict(shapes4.most_common(3))}  modelled plain at batch 8: {plain8}")
