"""Per round of the first 3 HumanEval prompts at 16 tokens (single stream, auto policy): each draft
request (size, depth) with the sequence's depth_left, tree nodes verified, tokens committed."""
from common.config import load_config
from common import wire
from treespec.bench_suite import Suite
from treespec.bench_data import load_prompts
from treespec.bench_run import run_one

s = Suite(load_config(), load_prompts("humaneval", 3), 16, 1)
eng = s.engine(None)
real_draft, real_verify = eng.draft, eng.verifier
class D:
    def __init__(self, r, tag): self.r, self.tag = r, tag
    def step(self, msg):
        if self.tag == 'draft':
            for q in msg.seqs:
                seq = eng.core.running.get(q.seq_id)
                print(f"  draft {q.seq_id} size={q.tree_size} depth={q.max_depth} out={len(seq.output) if seq else '?'}")
        else:
            for q in msg.seqs:
                print(f"  verify {q.seq_id} nodes={q.tree.tokens.shape[0] if q.tree.tokens.shape else 0}")
        return self.r.step(msg)
    def __getattr__(self, k): return getattr(self.r, k)
eng.draft, eng.verifier = D(real_draft, 'draft'), D(real_verify, 'verify')
for i, ids in enumerate(s.ids):
    r = run_one(eng, f"s{i}", ids, 16, False, False)
    print(i, r.committed)
