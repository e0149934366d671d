"""Median verify ms at batch 8 of each run's plain waves, and in its tree waves of the plain rounds (probes, plain
choices) and the 1-node tree rounds: does a verify pass cost more inside a speculating wave?

Usage: python verify_by_wave.py LOG.gz [...]"""
import gzip
import json
import statistics as st
import sys


def waves(events):
    """The rounds of each wave of requests (a wave closes when its last open request finishes)."""
    out, open_requests = [], 0
    for e in events:
        if e['event'] == 'submitted':
            if open_requests == 0:
                out.append([])
            open_requests += 1
        elif e['event'] == 'finished':
            open_requests -= 1
        elif e['event'] == 'round' and out:
            out[-1].append(e)
    return out


def median(values):
    return round(st.median(values)) if values else None


for path in sys.argv[1:]:
    events = [json.loads(line) for line in gzip.open(path, 'rt') if line.startswith('{')]
    steady = lambda r: r['batch'] == 8 and r['verify_ms'] < 1000  # leave out prefill rounds
    plain_waves = [r['verify_ms'] for w in waves(events) if not any(x['tree_nodes'] for x in w) for r in w if steady(r)]
    tree_waves = [r for w in waves(events) if any(x['tree_nodes'] for x in w) for r in w if steady(r)]
    probes = [r['verify_ms'] for r in tree_waves if r['tree_nodes'] == 0]
    one_node = [r['verify_ms'] for r in tree_waves if r['tree_nodes'] == 8 and 0 < r['draft_ms'] < 200]
    print(f"{path.split('/')[-1][:16]:16s} plain waves {median(plain_waves)} ms | tree waves: plain rounds "
          f"{median(probes)} ms ({len(probes)}), 1-node trees {median(one_node)} ms ({len(one_node)})")
