import json,sys,collections
rows=[]
for l in open(sys.argv[1]):
    try: d=json.loads(l)
    except Exception: continue
    if d['event']=='round' and sys.argv[2]<=d['timestamp']<=sys.argv[3]: rows.append(d)
plain=collections.defaultdict(list)
for d in rows:
    if d['tree_nodes']==0: plain[d['batch']].append(d['verify_ms']/d['batch'])
pr={b:sorted(v)[len(v)//2] for b,v in plain.items()}
print('plain ms/token by batch', {b:round(v,1) for b,v in sorted(pr.items())})
cat=collections.defaultdict(lambda:[0,0,0.0,0.0])
for d in rows:
    if d['tree_nodes']==0: continue
    t=d['draft_ms']+d['verify_ms']; acc=sum(d['accepted'])
    key=('lk' if d['lookup_grafts'] and d['tree_nodes']==d['lookup_grafts']*0+d['tree_nodes'] and d['draft_ms']==0 else 'tree', d['batch'])
    c=cat[key]; c[0]+=1; c[1]+=acc; c[2]+=t; c[3]+=t-acc*pr.get(d['batch'],pr[max(pr)])
for k,v in sorted(cat.items()): print(k, 'rounds',v[0],'tokens',v[1],'ms %.0f'%v[2],'loss_ms %.0f'%v[3])
print('total loss ms %.0f'%sum(v[3] for v in cat.values()))
