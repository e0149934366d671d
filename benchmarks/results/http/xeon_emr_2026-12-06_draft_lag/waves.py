"""Per 8-request wave of a scheduler log: where the tree waves' time went (main prefill, the drafts' catch-up,
tree rounds at batch 8, plain probes, the tail below batch 8) and the wave's wall time.

Usage: python waves.py SCHEDULER_LOG[.gz]"""
import collections
import gzip
import json
import sys
from datetime import datetime

path = sys.argv[1]
events = [json.loads(line) for line in (gzip.open if path.endswith('.gz') else open)(path, 'rt') if line.startswith('{')]
stamp = lambda e: datetime.fromisoformat(e['timestamp'].replace('Z', '+00:00')).timestamp()
waves, cur = [], None
for e in events:
    if e['event'] == 'submitted':
        if cur is None or (cur['open'] == 0 and cur['n'] >= 8):
            cur = {'ev': [], 'open': 0, 'n': 0}
            waves.append(cur)
        cur['open'] += 1
        cur['n'] += 1
    if cur is None:
        continue
    cur['ev'].append(e)
    cur['open'] -= e['event'] == 'finished'


def kind(r):
    """prefill (a main-model prefill round: > 1 s, one token each), catch-up (a draft round > 500 ms: the drafts
    prefill their backlog), tree (drafted), lookup (lookup nodes only), plain."""
    if r['verify_ms'] > 1000 and sum(r['accepted']) == r['batch']:
        return 'prefill'
    if r['draft_ms'] > 500:
        return 'catch-up'
    return 'tree' if r['draft_ms'] > 0 else ('lookup' if r['tree_nodes'] else 'plain')


for w in waves:
    if w['n'] != 8:
        continue
    rounds = [e for e in w['ev'] if e['event'] == 'round']
    sub = [stamp(e) for e in w['ev'] if e['event'] == 'submitted']
    fin = [stamp(e) for e in w['ev'] if e['event'] == 'finished']
    mode = 'spec ' if any(r['tree_nodes'] for r in rounds) else 'plain'
    by = collections.defaultdict(lambda: [0, 0, 0.0])
    for r in rounds:
        b = by[(kind(r), 'batch 8' if r['batch'] >= 8 else 'batch < 8')]
        b[0] += 1
        b[1] += sum(r['accepted'])
        b[2] += r['verify_ms'] + r['draft_ms']
    print(f"{mode} wave: wall {max(fin) - min(sub):.1f} s, {len(rounds)} rounds")
    for (k, batch), (n, tokens, ms) in sorted(by.items()):
        print(f"    {k:8s} {batch:9s} {n:4d} rounds {tokens:5d} tokens {ms / 1e3:6.1f} s  {tokens / ms:.4f} tokens/ms")
