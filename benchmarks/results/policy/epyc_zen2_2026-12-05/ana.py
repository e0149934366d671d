import json,collections,sys
t0=sys.argv[1]
rows=[json.loads(l) for l in open(sys.argv[2] if len(sys.argv)>2 else "logs/scheduler-0.log") if l.startswith('{')]
rows=[r for r in rows if r['timestamp']>=t0]
rounds=[r for r in rows if r.get('event')=='round']
shapes=[r for r in rows if r.get('event')=='tree shape']
print(len(rounds),len(shapes))
reasons=collections.Counter((s.get('reason','')[:20],s.get('tree_size'),s.get('batch'),str(s.get('explore'))) for s in shapes)
for k,v in reasons.most_common(30): print(v,k)
agg=collections.defaultdict(lambda:[0,0,0.0,0.0])
for r in rounds:
    k=(r['batch'], r['tree_nodes']>0, r['lookup_grafts']>0)
    a=agg[k]; a[0]+=1; a[1]+=sum(r['accepted']); a[2]+=r['draft_ms']; a[3]+=r['verify_ms']
for k in sorted(agg):
    n,tok,d,v=agg[k]; print(k,'rounds',n,'tok',tok,'draft_ms',round(d),'verify_ms',round(v),'tok/s',round(tok/(d+v)*1000,2))
