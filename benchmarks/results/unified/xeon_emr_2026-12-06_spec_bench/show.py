import json, sys
for f in sys.argv[1:]:
    d = json.load(open(f)); a = d['aggregate']
    print(f.split('/')[-1], f"plain {a['plain_tokens_per_s']:.2f} spec {a['spec_tokens_per_s']:.2f} speedup {a['speedup']:.2f}x (decode {a['decode_speedup']:.2f}x) MAL {a['mean_accepted_length']:.2f} div {a['greedy_divergences']} not-ties {a['greedy_divergences_not_ties']} unclass {a['greedy_divergences_unclassified']}")
    print('   ', ', '.join(f"{c} {v['speedup']:.2f}x" for c, v in d['by_category'].items()))
