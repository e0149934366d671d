"""The A/B runs of one folder (the argument): one row per run (plain / tree tok/s, ratio, MAL, per-category
ratios, greedy divergences), then the mean and range per arm.   python3 summ.py sdpa_margin_ab
"""
import glob, json, os, re, statistics, sys
d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
rows = []
for f in sorted(glob.glob(f"{d}/sb16_*_*.json"), key=lambda f: int(re.search(r"sb16_(\d+)_", f).group(1))):
    j = json.load(open(f)); a = j["aggregate"]; c = j["by_category"]
    arm = re.search(r"sb16_\d+_(\w+)\.json", f).group(1)
    rows.append((arm, a["speedup"]))
    cats = " ".join(f"{k[:5]} {v['speedup']:.2f}x" for k, v in sorted(c.items()))
    print(f"{os.path.basename(f):18s} {a['plain_tokens_per_s']:.2f} / {a['spec_tokens_per_s']:.2f}  {a['speedup']:.3f}x  MAL {a['mean_accepted_length']:.2f}  {cats}  div {a['greedy_divergences']} (not ties {a['greedy_divergences_not_ties']})")
for arm in sorted({r[0] for r in rows}):
    xs = [s for a, s in rows if a == arm]
    print(arm, len(xs), f"mean {statistics.mean(xs):.3f}", f"range {min(xs):.3f}-{max(xs):.3f}")
