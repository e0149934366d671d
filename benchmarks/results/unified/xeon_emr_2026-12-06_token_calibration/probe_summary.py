"""Per tree wave of a probe8.py log: batch-8 rounds by choice (tree or plain) and reason, and the batch-8 rounds
where plain won with the critical path's draft fit below 0.8. Usage: python3 probe_summary.py LOG.jsonl"""
import collections, json, sys
wave, n = None, 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if 'wave' in r:
        if wave == 'spec':
            print(f"tree wave {n}: {dict(counts)}; plain with fit < 0.8: {low}")
        wave, counts, low = r['wave'], collections.Counter(), 0
        n += wave == 'spec'
        continue
    if 'out' in r and r['b'] == 8 and wave == 'spec':
        kind = 'tree' if r['out'] != [0, 0] else 'plain'
        counts[f"{kind} ({r['why'][:7].strip()})"] += 1
        low += kind == 'plain' and r['why'].startswith('max') and r["fit"] < 0.8
