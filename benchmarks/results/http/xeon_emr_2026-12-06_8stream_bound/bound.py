"""What a closed 8-stream wave can gain at most on this host: from one `service_http.sh ab` scheduler log, the plain
waves' prefill and decode time, the speculative waves' prefill, draft catch-up (their second round) and steady
1-node-tree rounds, and the ratio a wave would reach if every decode round were a steady one. python3 bound.py LOG"""
import gzip, json, statistics as st, sys
rs = [json.loads(l) for l in (gzip.open if sys.argv[1].endswith('.gz') else open)(sys.argv[1], 'rt') if '"event": "round"' in l]
waves, cur = [], []
for r in rs:  # waves: runs of 21+ rounds at 5+ sequences; a prefill round (> 1.5 s) starts a new one
    if r['batch'] >= 5 and r['verify_ms'] > 1500 and len(cur) > 20: waves.append(cur); cur = [r]
    elif r['batch'] >= 5: cur.append(r)
    elif cur and len(cur) > 20: waves.append(cur); cur = []
    elif cur: cur = []
if cur: waves.append(cur)
ms = lambda r: r['draft_ms'] + r['verify_ms']
plain = [w for w in waves if not any(r['tree_nodes'] for r in w)]
spec = [w for w in waves if any(r['tree_nodes'] for r in w)]
for w in plain:
    dec = [ms(r) for r in w[1:]]
    print(f"plain wave: prefill {w[0]['verify_ms']/1e3:.2f} s, {len(dec)} decode rounds {sum(dec)/1e3:.1f} s "
          f"({sum(sum(r['accepted']) for r in w[1:]) / sum(dec) * 1e3:.1f} tok/s), {sum(sum(r['accepted']) for r in w)} tokens")
for w in spec:
    steady = [r for r in w[2:] if r['batch'] == 8 and r['tree_nodes'] == 8 and not sum(r['lookup_nodes'])]
    rate = sum(sum(r['accepted']) for r in steady) / sum(ms(r) for r in steady) * 1e3
    tok = sum(sum(r['accepted']) for r in w)
    print(f"spec wave: prefill {w[0]['verify_ms']/1e3:.2f} s, catch-up round {ms(w[1])/1e3:.2f} s, {len(steady)} steady "
          f"1-node rounds at {rate:.1f} tok/s (median {st.median(ms(r) for r in steady):.0f} ms), all {sum(ms(r) for r in w)/1e3:.1f} s for {tok} tokens")
pp = st.mean(w[0]['verify_ms'] for w in plain) / 1e3
pd = st.mean(sum(ms(r) for r in w[1:]) for w in plain) / 1e3
ptok = st.mean(sum(sum(r['accepted']) for r in w) for w in plain)
rate = st.mean(sum(sum(r['accepted']) for r in w[2:] if r['tree_nodes'] == 8 and r['batch'] == 8 and not sum(r['lookup_nodes']))
               / sum(ms(r) for r in w[2:] if r['tree_nodes'] == 8 and r['batch'] == 8 and not sum(r['lookup_nodes'])) for w in spec) * 1e3
catch = st.mean(ms(w[1]) for w in spec) / 1e3
for c in (0.0, catch):
    print(f"bound with every decode round steady, catch-up {c:.2f} s: ({pp:.2f} + {pd:.1f}) / ({pp:.2f} + {c:.2f} + "
          f"{ptok:.0f} / {rate:.1f}) = {(pp + pd) / (pp + c + ptok / rate):.2f}x")
