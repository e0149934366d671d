"""Summary of an A/B folder written by ab_in_process.sh (or an older driver naming runs <name>_<run>_<arm>.json):
one row per run (plain / tree tok/s, ratio, MAL, per-category ratios, greedy divergences), then the mean and range
per (dataset, arm).   python3 benchmarks/ab_summary.py FOLDER"""
import glob, json, os, re, statistics, sys
d = sys.argv[1]
rows = []
for f in sorted(glob.glob(f"{d}/*_*_*.json"), key=lambda f: int(re.search(r"_(\d+)_\w+\.json", f).group(1))):
    j = json.load(open(f)); a = j["aggregate"]; c = j["by_category"]
    ds, arm = re.search(r"(\w+?)_\d+_(\w+)\.json", os.path.basename(f)).groups()
    rows.append((ds, arm, a["speedup"]))
    cats = " ".join(f"{k[:5]} {v['speedup']:.2f}x" for k, v in sorted(c.items()))
    print(f"{os.path.basename(f):22s} {a['plain_tokens_per_s']:.2f} / {a['spec_tokens_per_s']:.2f}  {a['speedup']:.3f}x  "
          f"MAL {a['mean_accepted_length']:.2f}  {cats}  div {a['greedy_divergences']} (not ties {a['greedy_divergences_not_ties']})")
for key in sorted({r[:2] for r in rows}):
    xs = [s for ds, arm, s in rows if (ds, arm) == key]
    print(*key, len(xs), f"mean {statistics.mean(xs):.3f}", f"range {min(xs):.3f}-{max(xs):.3f}")
