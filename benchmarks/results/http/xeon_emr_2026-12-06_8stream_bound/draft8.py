"""Draft step of 8 sequences, 1-node trees (depth 1), 2 new tokens each, after 100-token prompts: ms, and a profile."""
import sys, time, numpy as np, torch
from common import wire
from common.config import load_config
from common.modeling.build import draft_model
from common.host import cpu_model
from services.draft.runner import DraftRunner
cfg = load_config()
model, _ = draft_model(cfg)
r = DraftRunner(model, 8, 2048)
rng = np.random.default_rng(0)
ids = {f"s{i}": [int(x) for x in rng.integers(100, 20000, 100)] for i in range(8)}
held = {k: 0 for k in ids}
def step(size, depth, new=2):
    seqs = []
    for k in ids:
        toks = [int(x) for x in rng.integers(100, 20000, new)] if held[k] else ids[k]
        seqs.append(wire.DraftSeq(seq_id=k, prefix_len=held[k], new_tokens=toks, tree_size=size, max_depth=depth))
        held[k] += len(toks)
    t = time.perf_counter(); res = r.step(wire.DraftStep(round=0, seqs=seqs)); return (time.perf_counter() - t) * 1e3, res
print(cpu_model())
print("catch-up (8 x 100 tokens) ms", round(step(1, 1)[0]))
for size, depth in ((1, 1), (2, 2), (4, 3)):
    ts = [step(size, depth)[0] for _ in range(12)]
    print(size, depth, "step ms", [round(t) for t in ts], "median", round(float(np.median(ts)), 1))
from torch.profiler import profile
with profile() as p:
    for _ in range(5): step(1, 1)
print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))
