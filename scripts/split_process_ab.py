"""The same speculative rounds with the model runners in this process or in child processes (no ZeroMQ).

The service runs the draft and the verifier in their own processes; ``treespec bench`` runs both runners in
one. This A/B separates "two processes" from everything else the service adds (ZeroMQ, CURVE, the
scheduler process, the I/O threads): three engines drive the same fixed tree (``--tree-size``) with the same
round driver (``LocalEngine``), their runners (1) both in this process (``local``), (2) the draft's in a child
process (``draft-child``), (3) both in child processes (``children``); a child is built by the workers' own
``build_draft`` / ``build_verifier`` and gets each step as one ``wire`` frame over a pipe. Every prompt runs
on every arm, the arms' order rotated prompt by prompt. Prints per arm the wall seconds and the sums of the
draft's and the verifier's step times (ms, as the runners report them) and writes them (``--json``) with the
CPU model. Loads the pair three times (about 8 GiB).

    PYTHONPATH=$PWD .venv/bin/python scripts/split_process_ab.py --prompts 6 --json out.json
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time

ARMS = ("local", "draft-child", "children")


def _serve(role: str, tree_size: int, conn) -> None:
    """Child: build the worker's runner, then answer ("step", frame) / ("free", ids) / ("stop", None)."""
    from common import wire
    from common.config import load_config
    from services.scheduler.local import NullLog
    cfg = load_config(None, {"tree_size": tree_size})
    if role == "draft":
        from services.draft.worker import build_draft
        runner = build_draft(cfg, "child", NullLog()).runner
    else:
        from services.verifier.worker import build_verifier
        runner = build_verifier(cfg, "child", NullLog()).runner
    conn.send("ready")
    while (req := conn.recv())[0] != "stop":
        kind, body = req
        if kind == "free":
            runner.free(body)
            conn.send(None)
        else:
            conn.send(wire.encode(runner.step(wire.decode(body))))


class ChildRunner:
    """A runner in a child process (the ``Runner`` protocol of ``services/scheduler/local.py``)."""

    def __init__(self, role: str, tree_size: int) -> None:
        self.conn, child = mp.Pipe()
        self.proc = mp.Process(target=_serve, args=(role, tree_size, child))
        self.proc.start()
        if self.conn.recv() != "ready":
            raise RuntimeError(f"the {role} child did not start")

    def step(self, msg):
        from common import wire
        self.conn.send(("step", wire.encode(msg)))
        return wire.decode(self.conn.recv())

    def free(self, seq_ids: list[str], keep: bool = True) -> None:
        self.conn.send(("free", list(seq_ids)))
        self.conn.recv()

    def stop(self) -> None:
        self.conn.send(("stop", None))
        self.proc.join()


def _engines(tree_size: int):
    """({arm: engine}, tokenizer, children) for the three arms."""
    from common.config import load_config
    from common.modeling.build import eos_ids, load_pair
    from common.tree_budget import TreeBudget
    from services.scheduler.core import SchedulerCore
    from services.scheduler.local import LocalEngine
    from treespec.engine import make_engine, with_tree
    cfg = load_config(None, {"tree_size": tree_size})
    tree = TreeBudget.from_config(cfg).default_shape()
    main, draft, tok = load_pair(cfg)
    draft_child, verifier_child = ChildRunner("draft", tree_size), ChildRunner("verifier", tree_size)

    def driven(verifier, drafter) -> LocalEngine:
        core = SchedulerCore(1, cfg.max_queue, cfg.max_model_len, eos_ids(tok))
        return LocalEngine(with_tree(cfg, tree), core, verifier, drafter)
    local = make_engine(cfg, main, draft, tok, 1, tree)
    own_verifier = make_engine(cfg, main, draft, tok, 1, tree).verifier
    engines = {"local": local, "draft-child": driven(own_verifier, draft_child),
               "children": driven(verifier_child, draft_child)}
    return engines, tok, (draft_child, verifier_child)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--tree-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    mp.set_start_method("spawn")
    from treespec.bench import write_json
    from treespec.bench_data import load_prompts
    from common.host import cpu_model
    from treespec.bench_run import run_one
    from treespec.generate import encode_prompt
    engines, tok, children = _engines(args.tree_size)
    prompts = load_prompts("humaneval", args.prompts + 1)
    ids = [encode_prompt(tok, p.text, p.chat) for p in prompts]
    for arm, engine in engines.items():
        run_one(engine, f"warm-{arm}", ids[-1], 16, False)  # a prompt not measured: no prefix-cache hit below
    got = {a: {"wall_s": 0.0, "draft_ms": 0.0, "verify_ms": 0.0, "draft_steps": 0} for a in ARMS}
    for i in range(args.prompts):
        for arm in ARMS[i % 3:] + ARMS[:i % 3]:
            e, g = engines[arm], got[arm]
            d0, v0 = len(e.stats.draft_ms), len(e.stats.verify_ms)
            time.sleep(0.3)
            r = run_one(e, f"p{i}-{arm}", ids[i], args.max_new_tokens, False, ignore_eos=True)
            g["wall_s"] += r.seconds
            g["draft_ms"] += sum(e.stats.draft_ms[d0:])
            g["verify_ms"] += sum(e.stats.verify_ms[v0 + 1:])  # the prefill step left out
            g["draft_steps"] += len(e.stats.draft_ms) - d0
        print(i, {a: round(g["wall_s"], 2) for a, g in got.items()}, flush=True)
    for child in children:
        child.stop()
    out = {"cpu_model": cpu_model(), "args": vars(args), "arms": got,
           "vs_local": {a: round(got[a]["wall_s"] / got["local"]["wall_s"], 3) for a in ARMS}}
    print(out)
    if args.json:
        write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
