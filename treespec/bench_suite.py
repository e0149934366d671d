"""The benchmark runs behind ``treespec bench``, sharing one loaded model pair."""

from __future__ import annotations

import platform
import time
from dataclasses import replace

import torch
from tqdm import tqdm

from common.config import AUTO, Config
from common.modeling.build import eos_ids, load_pair
from common.tree_budget import TreeBudget
from treespec.engine import make_engine, measure_costs
from common.host import cpu_model
from treespec.bench_run import Run, divergence, run_concurrent, run_one, timeline
from treespec.generate import encode_prompt


class Suite:
    """Plain vs speculative runs over the same prompts with one loaded (main, draft) pair."""

    def __init__(self, cfg: Config, prompts, max_new: int, slots: int, ignore_eos: bool = False,
                 no_lookup: bool = False) -> None:
        self.cfg, self.prompts, self.max_new, self.slots = cfg, prompts, max_new, slots
        self.ignore_eos = ignore_eos
        self.no_lookup = no_lookup  # also run speculation with prompt lookup off, interleaved
        self.main, self.draft, self.tok = load_pair(cfg)
        self.ids = [encode_prompt(self.tok, p.text, p.chat) for p in prompts]
        self.auto = cfg.tree_size == AUTO
        self.costs = measure_costs(self.main, self.draft) if self.auto else None
        self.tree = None if self.auto else TreeBudget.from_config(cfg).default_shape()

    def engine(self, tree: tuple[int, int] | None, slots: int = 1, lookup: bool = True, prefix_cache: bool = True):
        """tree None = the tree_size "auto" policy (measured costs, online acceptance);
        ``lookup`` False turns prompt lookup off (else as configured); ``prefix_cache`` False: every
        request prefills its whole prompt, even one this engine has served before."""
        cfg = self.cfg if lookup else replace(self.cfg, prompt_lookup=False)
        cfg = cfg if prefix_cache else replace(cfg, prefix_cache=False)
        return make_engine(cfg, self.main, self.draft, self.tok, slots, tree, self.costs)

    def compare(self) -> dict:
        """Each prompt: plain greedy (recording logit gaps), then speculative greedy."""
        plain, spec = self.engine((0, 0)), self.engine(self.tree)
        # the gap re-run must repeat plain's trajectory: with plain's prefix cache it would reuse the
        # prompt's KV and decode its last token alone, which rounds differently in bf16 and can flip a
        # later near-tie (a Spec-Bench run read a 10.4 gap from such a re-run where plain's own was 0.125);
        # where it still differs (plain reused a shared chat system prompt's KV), divergence() says so
        gapper = self.engine((0, 0), prefix_cache=False)
        bare = self.engine(self.tree, lookup=False) if self.no_lookup else None
        records = []
        for i, (p, ids) in enumerate(tqdm(list(zip(self.prompts, self.ids)), desc="plain vs spec", unit="prompt")):
            a = run_one(plain, f"p{i}", ids, self.max_new, False, self.ignore_eos)
            b = run_one(spec, f"s{i}", ids, self.max_new, False, self.ignore_eos)
            g = run_one(gapper, f"g{i}", ids, self.max_new, True, self.ignore_eos) if a.tokens != b.tokens else None
            if not records:
                lines = [dict(row, mode=m) for m, r in (("plain", a), ("spec", b)) for row in timeline(r)]
            div = divergence(a, b, self.cfg.dtype, g)  # g: untimed re-run of plain, for its logit gaps
            records.append({"id": p.id, "category": p.category, "prompt_tokens": len(ids),
                            "plain": a.summary(), "spec": b.summary(), "identical": a.tokens == b.tokens,
                            "divergence": div})
            if bare is not None:
                c = run_one(bare, f"n{i}", ids, self.max_new, False, self.ignore_eos)
                records[-1].update(spec_no_lookup=c.summary(), identical_no_lookup=c.tokens == b.tokens)
        aggregate = {**self._aggregate(records, spec.core), **lookup_summary(records, spec.policy.lookup)}
        return {"config": self.describe(), "records": records, "timeline": lines,
                "aggregate": aggregate, "by_category": self._by_category(records)}

    def describe(self) -> dict:
        """The run's configuration for the JSON: models, tree size, cost curves (ms), kernels, CPU model."""
        return {"main_model_path": self.cfg.main_model_path, "draft_model_path": self.cfg.draft_model_path,
                "dtype": self.cfg.dtype, "device": self.cfg.device,
                "tree_size": "auto" if self.auto else self.tree[0], "max_accept_length": self.cfg.max_accept_length,
                "cost_curves_ms": {"verify": self.costs[0].points,
                                   "draft": self.costs[1].points} if self.costs else None,
                "draft_quantization": self.cfg.draft_quantization, "main_quantization": self.cfg.main_quantization,
                "draft_vocab_size": self.cfg.draft_vocab_size, "max_new_tokens": self.max_new,
                "draft_context_window": self.cfg.draft_context_window, "main_int4_dense": self.cfg.main_int4_dense,
                "kernels": {"main": _plan(self.main), "draft": _plan(self.draft)},
                "prompts": len(self.prompts), "torch_threads": torch.get_num_threads(),
                "machine": platform.machine(), "cpu_model": cpu_model(), "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

    @staticmethod
    def _aggregate(records: list[dict], core) -> dict:
        def tps(kind):
            return sum(len(r[kind]["tokens"]) for r in records) / sum(r[kind]["seconds"] for r in records)
        rounds = [c for r in records for c in r["spec"]["committed"]]
        divs = [r["divergence"] for r in records if r["divergence"]]
        drafts = max(core.num_drafts, 1)
        def decode_tps(kind):  # excludes the prefill / first token (TTFT)
            return (sum(len(r[kind]["tokens"]) - 1 for r in records)
                    / sum(r[kind]["seconds"] - r[kind]["ttft"] for r in records))
        return {
            "plain_tokens_per_s": tps("plain"), "spec_tokens_per_s": tps("spec"),
            "plain_decode_tokens_per_s": decode_tps("plain"), "spec_decode_tokens_per_s": decode_tps("spec"),
            "decode_speedup": decode_tps("spec") / decode_tps("plain"),
            "speedup": tps("spec") / tps("plain"),
            "mean_accepted_length": sum(rounds) / max(len(rounds), 1),
            "acceptance_rate_by_depth": [n / drafts for n in core.accepted_per_pos],
            "draft_tokens_accepted_fraction": core.num_accepted / max(core.num_draft_tokens, 1),
            "greedy_identical": not divs,
            "greedy_divergences": len(divs),
            "greedy_divergences_not_ties": sum(1 for d in divs if d["tie"] is False),
            "greedy_divergences_unclassified": sum(1 for d in divs if d["tie"] is None),
            "prompts": len(records)}

    @staticmethod
    def _by_category(records: list[dict]) -> dict:
        out = {}
        for cat in sorted({r["category"] for r in records}):
            rs = [r for r in records if r["category"] == cat]
            rounds = [c for r in rs for c in r["spec"]["committed"]]
            p = sum(len(r["plain"]["tokens"]) for r in rs) / sum(r["plain"]["seconds"] for r in rs)
            s = sum(len(r["spec"]["tokens"]) for r in rs) / sum(r["spec"]["seconds"] for r in rs)
            out[cat] = {"prompts": len(rs), "plain_tokens_per_s": p, "spec_tokens_per_s": s, "speedup": s / p,
                        "mean_accepted_length": sum(rounds) / max(len(rounds), 1)}
            if "spec_no_lookup" in rs[0]:
                out[cat].update(_no_lookup_rates(rs, p))
        return out

    def hf_baselines(self, kinds: list[str], records: list[dict]) -> dict:
        """HF transformers plain and/or assisted generation on the same prompts."""
        from treespec.bench_hf import hf_generate, load_hf
        hf_main = load_hf(self.cfg.main_model_path, self.cfg.dtype)
        hf_draft = load_hf(self.cfg.draft_model_path, self.cfg.dtype) if "hf-assisted" in kinds else None
        eos = eos_ids(self.tok)
        out = {}
        for kind in kinds:
            runs: list[Run] = []
            for ids in tqdm(self.ids, desc=kind, unit="prompt"):
                runs.append(hf_generate(hf_main, ids, self.max_new, eos, hf_draft if kind == "hf-assisted" else None))
            key = kind.replace("-", "_")
            out[f"{key}_tokens_per_s"] = sum(len(r.tokens) for r in runs) / sum(r.seconds for r in runs)
            for rec, r in zip(records, runs):
                rec[key] = {"tokens": len(r.tokens), "seconds": r.seconds}
        plain = sum(len(r["plain"]["tokens"]) for r in records) / sum(r["plain"]["seconds"] for r in records)
        if "hf_assisted_tokens_per_s" in out:
            out["hf_assisted_ratio_vs_plain"] = out["hf_assisted_tokens_per_s"] / plain
        return out

    def sweep(self, sizes: list[int]) -> list[dict]:
        """Spec tokens/s and MAL at each forced tree size (same prompts)."""
        rows = []
        for size in tqdm(sizes, desc="tree sizes", unit="size"):
            eng = self.engine((size, min(self.cfg.max_accept_length, max(size, 1))))
            runs = [run_one(eng, f"t{size}-{i}", ids, self.max_new, gaps=False) for i, ids in enumerate(self.ids)]
            rounds = [c for r in runs for c in r.committed]
            rows.append({"tree_size": size,
                         "tokens_per_s": sum(len(r.tokens) for r in runs) / sum(r.seconds for r in runs),
                         "mean_accepted_length": sum(rounds) / max(len(rounds), 1)})
        return rows

    def concurrency(self, levels: list[int]) -> list[dict]:
        """Aggregate throughput and ITL percentiles, spec vs plain, at each concurrency."""
        rows = []
        for c in tqdm(levels, desc="concurrency", unit="level"):
            prompts = [self.ids[i % len(self.ids)] for i in range(c)]
            for mode, tree in (("plain", (0, 0)), ("spec", self.tree)):
                eng = self.engine(tree, slots=c)
                r = run_concurrent(eng, prompts, self.max_new)
                size = tree[0] if tree else f"auto (last {eng.policy.best[0]}: {eng.policy.last_reason})"
                rows.append({"mode": mode, "tree_size": size, **r})
        return rows


def _plan(model) -> dict | None:
    """A model's kernel plan as recorded in the result JSON (ladders, probe timings in ms, source)."""
    plan = getattr(model, "kernel_plan", None)
    return None if plan is None else {"ladders": plan.ladders, "timings_ms": plan.timings, "source": plan.source}


def _no_lookup_rates(records: list[dict], plain_tps: float) -> dict:
    """Tokens/s, speedup over plain and MAL of the lookup-off speculative runs."""
    tps = sum(len(r["spec_no_lookup"]["tokens"]) for r in records) / sum(r["spec_no_lookup"]["seconds"] for r in records)
    rounds = [c for r in records for c in r["spec_no_lookup"]["committed"]]
    return {"spec_no_lookup_tokens_per_s": tps, "spec_no_lookup_speedup": tps / plain_tps,
            "spec_no_lookup_mean_accepted_length": sum(rounds) / max(len(rounds), 1)}


def lookup_summary(records: list[dict], stats) -> dict:
    """Prompt-lookup counters of the speculative runs (``stats``: the engine's
    ``TreePolicy.lookup``) and, when measured, the lookup-off comparison."""
    out = {"lookup_proposed_tokens": stats.proposed, "lookup_accepted_tokens": stats.accepted,
           "lookup_acceptance": stats.accepted / stats.proposed if stats.proposed else 0.0}
    if records and "spec_no_lookup" in records[0]:
        plain = sum(len(r["plain"]["tokens"]) for r in records) / sum(r["plain"]["seconds"] for r in records)
        out.update(_no_lookup_rates(records, plain))
        spec = sum(len(r["spec"]["tokens"]) for r in records) / sum(r["spec"]["seconds"] for r in records)
        out["lookup_on_vs_off_tokens_per_s"] = spec / out["spec_no_lookup_tokens_per_s"]
        out["no_lookup_identical"] = all(r["identical_no_lookup"] for r in records)
    return out
