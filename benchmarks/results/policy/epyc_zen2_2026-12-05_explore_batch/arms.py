import json,sys,collections
from datetime import datetime
rows=[]
for l in open(sys.argv[1]):
    try: d=json.loads(l)
    except Exception: continue
    rows.append(d)
bounds=sys.argv[2:]
def ts(s): return datetime.fromisoformat(s.replace('Z',''))
for a,b in zip(bounds,bounds[1:]):
    rr=[d for d in rows if d['event']=='round' and a<=d['timestamp']<b]
    sub=[d for d in rows if d['event']=='submitted' and a<=d['timestamp']<b]
    fin=[d for d in rows if d['event']=='finished' and a<=d['timestamp']<b]
    span=(ts(fin[-1]['timestamp'])-ts(sub[0]['timestamp'])).total_seconds()
    work=sum(d['draft_ms']+d['verify_ms'] for d in rr)/1000
    tok=sum(sum(d['accepted']) for d in rr)
    pb=collections.defaultdict(lambda:[0,0.0,0])
    for d in rr:
        if d['tree_nodes']==0:
            x=pb[d['batch']]; x[0]+=1; x[1]+=d['verify_ms']; x[2]+=sum(d['accepted'])
    # gaps between rounds
    gaps=sum(max(0,(ts(y['timestamp'])-ts(x['timestamp'])).total_seconds()*1000-(y['draft_ms']+y['verify_ms'])) for x,y in zip(rr,rr[1:]))/1000
    print(a[11:19], 'span %.1f work %.1f gaps %.1f tokens %d rounds %d'%(span,work,gaps,tok,len(rr)), {k:(v[0],round(v[1]/1000,1)) for k,v in sorted(pb.items())})
