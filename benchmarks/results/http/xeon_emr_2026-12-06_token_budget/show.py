"""One line per 8-stream `ab` run in a folder (default: this one): run, time, plain and tree tok/s, ratio, TTFT
p50, and the mean verify steps of the tree waves' 128-token requests (128 = decoded plainly throughout; the plain
waves' requests take 128 each and as many requests ran in each mode, so tree mean = 2 x mean - 128).
python3 show.py [FOLDER]"""
import glob, gzip, json, os, re, statistics as st, sys
folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
key = lambda f: (re.match(r"([a-z]*)", os.path.basename(f)).group(1), int(re.search(r"(\d+)_", os.path.basename(f)).group(1)))
for f in sorted(glob.glob(os.path.join(folder, "*.json")), key=key):
    d = json.load(open(f)); plain, spec = d["concurrency"]
    steps = [json.loads(l)["verify_steps"] for l in gzip.open(f[:-5] + ".scheduler.log.gz", "rt")
             if '"finished"' in l and '"output_tokens": 128' in l]
    print(f"{os.path.basename(f)[:-5]:26s} {d['config']['time'][11:16]} plain {plain['tokens_per_s']:5.1f} tree {spec['tokens_per_s']:5.1f} tok/s "
          f"{spec['speedup_vs_plain']:.2f}x  TTFT {plain['ttft_p50_ms']/1e3:4.1f} / {spec['ttft_p50_ms']/1e3:4.1f} s  "
          f"tree waves: {2 * st.mean(steps) - 128:.0f} steps per request")
