import json,sys
for f in sys.argv[1:]:
    d=json.load(open(f))
    ratios=[]
    tp=ts=0
    for r in d['records']:
        p,s=r['plain'],r['spec']
        tp+=p['seconds']; ts+=s['seconds']
        ratios.append(round(p['seconds']/s['seconds'],2))
    a=d['aggregate']
    print(f.split('/')[-1], 'per-prompt', ratios, 'total plain/spec s', round(tp,1), round(ts,1), 'ratio', round(tp/ts,3), {k:(round(v,3) if isinstance(v,float) else v) for k,v in a.items() if 'speed' in k or 'mal' in k.lower() or 'mean_acc' in k})
