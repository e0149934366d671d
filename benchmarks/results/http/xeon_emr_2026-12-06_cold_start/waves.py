"""The 5+ sequence waves of a scheduler log: rounds, worker time, tokens, tree rounds: python3 waves.py LOG."""
import gzip, json, sys
rs = [json.loads(l) for l in (gzip.open if sys.argv[1].endswith('.gz') else open)(sys.argv[1], 'rt') if '"event": "round"' in l]
waves, cur = [], []
for r in rs:
    big = r['batch'] >= 5
    if big: cur.append(r)
    elif cur and len(cur) > 20: waves.append(cur); cur = []
    elif cur: cur = []
if cur: waves.append(cur)
for w in waves:
    ms = sum(r['draft_ms'] + r['verify_ms'] for r in w); tok = sum(sum(r['accepted']) for r in w)
    spec = sum(1 for r in w if r['tree_nodes'] > 0)
    print(f"rounds {w[0]['round']}-{w[-1]['round']} n {len(w)} work {ms/1e3:.1f} s (first {w[0]['verify_ms']/1e3:.1f}) tokens {tok} -> {tok/ms*1e3:.1f} tok/s  tree rounds {spec}")
