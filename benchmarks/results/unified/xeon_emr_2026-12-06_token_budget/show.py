"""Print the 16-token A/B runs of this folder: per JSON the single-stream speedup (plain and spec in one run),
MAL, and the 8-stream ratio. python3 show.py"""
import glob, json
for f in sorted(glob.glob("*_ab_*.json")):
    d = json.load(open(f)); a = d["aggregate"]; c = {x["mode"]: x for x in d["concurrency"]}
    print(f"{f:26s} 1 stream {a['speedup']:.2f}x (plain {a['plain_tokens_per_s']:.2f} tok/s, MAL {a['mean_accepted_length']:.2f})"
          f"   8 streams {c['spec']['tokens_per_s'] / c['plain']['tokens_per_s']:.2f}x (plain {c['plain']['tokens_per_s']:.1f} tok/s)")
