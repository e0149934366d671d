"""8-stream phases of a service_http ab scheduler log: rounds, tree rounds, explores (>8 nodes w/o lookup), lookup rounds, draft/verify ms."""
import json, sys, gzip
op = gzip.open if sys.argv[1].endswith('.gz') else open
rs = [json.loads(l) for l in op(sys.argv[1], 'rt') if '"event": "round"' in l]
b8 = [r for r in rs if r['batch'] >= 5]
phases, cur = [], []
for r in b8:
    if cur and r['round'] - cur[-1]['round'] > 3:
        phases.append(cur); cur = []
    cur.append(r)
phases.append(cur)
for ph in phases:
    if len(ph) < 20: continue
    dec = ph[1:]  # the first round is the wave's prefill
    tree = [r for r in dec if r['tree_nodes'] > sum(r['lookup_nodes'])]
    look = [r for r in dec if sum(r['lookup_nodes']) > 0]
    plain = [r for r in dec if r['tree_nodes'] == 0]
    t = sum(r['verify_ms'] + r['draft_ms'] for r in dec) / 1e3
    tok = sum(sum(r['accepted']) for r in dec)
    print(f"rounds {ph[0]['round']}-{ph[-1]['round']}: prefill {ph[0]['verify_ms']:.0f} ms; decode {len(dec)} rounds "
          f"{t:.1f} s {tok} tokens {tok/t:.1f} tok/s; tree rounds {len(tree)}, lookup rounds {len(look)}, plain {len(plain)}; "
          f"draft {sum(r['draft_ms'] for r in dec)/1e3:.1f} s (max {max(r['draft_ms'] for r in dec):.0f} ms)")
