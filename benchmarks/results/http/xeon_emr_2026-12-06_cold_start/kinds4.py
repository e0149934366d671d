"""Round kinds at one batch size of a scheduler log: python3 kinds4.py LOG[.gz] BATCH (tree<N> = N draft nodes
in the round, +lk: lookup nodes, +catchup: draft over 400 ms)."""
import json, sys, gzip, collections
op = gzip.open if sys.argv[1].endswith('.gz') else open
B = int(sys.argv[2])
rs = [json.loads(l) for l in op(sys.argv[1], 'rt') if '"event": "round"' in l]
k = collections.defaultdict(list)
for r in rs:
    if r['batch'] != B: continue
    lk = sum(r['lookup_nodes']); own = r['tree_nodes'] - lk
    kind = 'plain' if r['tree_nodes'] == 0 else f"tree{own}" + ("+lk" if lk else "")
    if r['draft_ms'] > 400: kind += "+catchup"
    k[kind].append(r)
for kind, v in sorted(k.items(), key=lambda kv: -len(kv[1]))[:12]:
    ms = sum(r['draft_ms'] + r['verify_ms'] for r in v); tk = sum(sum(r['accepted']) for r in v)
    print(f"   {kind:20s} n {len(v):3d} ms/round {ms/len(v):6.0f} (d {sum(r['draft_ms'] for r in v)/len(v):4.0f}) tok/round {tk/len(v):5.2f} tok/s {tk/ms*1e3:5.1f} total {ms/1e3:5.1f}s")
