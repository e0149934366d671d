"""Per 8-request wave: wall from first submit to last finish, sum of round times, the tail (rounds after the first finish)."""
import gzip, json, sys
from datetime import datetime
ev = [json.loads(l) for l in (gzip.open if sys.argv[1].endswith('.gz') else open)(sys.argv[1], 'rt') if l.startswith('{')]
ts = lambda e: datetime.fromisoformat(e['timestamp'].replace('Z', '+00:00')).timestamp()
waves, cur = [], None
for e in ev:
    if e['event'] == 'submitted':
        if cur is None or cur['open'] == 0 and cur['n'] >= 8: cur = {'ev': [], 'open': 0, 'n': 0}; waves.append(cur)
        cur['open'] += 1; cur['n'] += 1
    if cur is None: continue
    cur['ev'].append(e)
    if e['event'] == 'finished': cur['open'] -= 1
for w in waves:
    if w['n'] != 8: continue
    sub = [ts(e) for e in w['ev'] if e['event'] == 'submitted']; fin = [(ts(e), e) for e in w['ev'] if e['event'] == 'finished']
    rounds = [e for e in w['ev'] if e['event'] == 'round']
    spec = any(r['tree_nodes'] for r in rounds)
    rt = sum(r['draft_ms'] + r['verify_ms'] for r in rounds) / 1e3
    big = [f for f in fin if f[1]['output_tokens'] > 1]
    if not big: continue
    first_fin = min(t for t, _ in big)
    tail = [r for r in rounds if ts(r) > first_fin]
    print(f"{'spec ' if spec else 'plain'} wall {max(t for t,_ in fin) - min(sub):.2f} s rounds {rt:.2f} s ({len(rounds)}), "
          f"finishes spread {max(t for t,_ in big) - first_fin:.2f} s, tail {len(tail)} rounds {sum(r['draft_ms']+r['verify_ms'] for r in tail)/1e3:.2f} s, "
          f"steps {sorted(f[1]['verify_steps'] for f in big)}")
print('--- tails')
for w in waves:
    rounds = [e for e in w['ev'] if e['event'] == 'round']
    if w['n'] != 8 or not any(r['tree_nodes'] for r in rounds) or len(rounds) > 80: continue
    for r in rounds[-12:]:
        print(r['batch'], r['tree_nodes'], r['lookup_nodes'], r['accepted'], round(r['draft_ms']), round(r['verify_ms']))
    print()
