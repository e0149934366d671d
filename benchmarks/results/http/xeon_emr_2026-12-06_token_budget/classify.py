import gzip, json, statistics as st, sys, collections
rs = [json.loads(l) for l in (gzip.open if sys.argv[1].endswith('.gz') else open)(sys.argv[1], 'rt') if '"event": "round"' in l]
print(rs[5].keys())
waves, cur = [], []
for r in rs:
    if r['batch'] >= 5 and r['verify_ms'] > 1500 and len(cur) > 20: waves.append(cur); cur = [r]
    elif r['batch'] >= 5: cur.append(r)
    elif cur and len(cur) > 20: waves.append(cur); cur = []
    elif cur: cur = []
if cur: waves.append(cur)
ms = lambda r: r['draft_ms'] + r['verify_ms']
for w in waves:
    if not any(r['tree_nodes'] for r in w): continue
    cat = collections.defaultdict(lambda: [0, 0.0, 0])
    for r in w[2:]:
        lk = sum(r['lookup_nodes'])
        k = (r['batch'], 'plain' if not r['tree_nodes'] else ('1node' if r['tree_nodes'] == r['batch'] and not lk else f"tree{r['tree_nodes']}+lk{lk}" if r['tree_nodes'] > r['batch'] else f"small{r['tree_nodes']}+lk{lk}"))
        c = cat[k]; c[0] += 1; c[1] += ms(r); c[2] += sum(r['accepted'])
    print('wave total', sum(ms(r) for r in w)/1e3, 'tokens', sum(sum(r['accepted']) for r in w))
    for k, (n, t, tok) in sorted(cat.items(), key=lambda kv: -kv[1][1]):
        print(f"  {k}: {n} rounds {t/1e3:.2f} s {tok} tok {tok/t*1e3 if t else 0:.1f} tok/s")
