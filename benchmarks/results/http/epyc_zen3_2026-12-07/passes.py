"""Per bench pass (8 consecutive requests after the warm-up) of a scheduler log: wall time, round kinds, ms sums.
Usage: python passes.py LOG [ORDER]  ORDER e.g. PSSPPSSP (mode of each pass)."""
import gzip, json, sys, collections
from datetime import datetime
path = sys.argv[1]; order = sys.argv[2] if len(sys.argv) > 2 else 'PSSPPSSP'
ev = [json.loads(l) for l in (gzip.open if path.endswith('.gz') else open)(path, 'rt') if l.startswith('{')]
ts = lambda e: datetime.fromisoformat(e['timestamp'].replace('Z', '+00:00')).timestamp()
subs = [e for e in ev if e['event'] == 'submitted']
fin = {e['request_id']: e for e in ev if e['event'] == 'finished'}
subs = [s for s in subs if fin.get(s['request_id'], {}).get('output_tokens', 0) > 1]
rounds = [e for e in ev if e['event'] == 'round']
def kind(r):
    if r['verify_ms'] > 1000 and sum(r['accepted']) == r['batch']: return 'prefill'
    if r['draft_ms'] > 300: return 'catchup'
    return 'tree' if r['draft_ms'] > 0 else ('lookup' if r['tree_nodes'] else 'plain')
for i in range(0, len(subs) // 8 * 8, 8):
    grp = subs[i:i + 8]; t0 = ts(grp[0]); t1 = max(ts(fin[s['request_id']]) for s in grp)
    rs = [r for r in rounds if t0 <= ts(r) <= t1 + 0.01]
    k = collections.defaultdict(lambda: [0, 0.0, 0.0, 0])
    for r in rs:
        x = k[kind(r)]; x[0] += 1; x[1] += r['verify_ms']; x[2] += r['draft_ms']; x[3] += sum(r['accepted'])
    steps = sum(fin[s['request_id']]['verify_steps'] for s in grp) / 8
    toks = sum(fin[s['request_id']]['output_tokens'] for s in grp)
    m = order[i // 8] if i // 8 < len(order) else '?'
    print(f"pass {i//8} {m} wall {t1-t0:6.1f}s tok/s {toks/(t1-t0):5.2f} steps/req {steps:5.1f} rounds {len(rs)} busy {sum(r['verify_ms']+r['draft_ms'] for r in rs)/1000:6.1f}s | " +
          ' '.join(f"{n}:{v[0]}r v{v[1]/1000:.1f}s d{v[2]/1000:.1f}s t{v[3]}" for n, v in sorted(k.items())))
