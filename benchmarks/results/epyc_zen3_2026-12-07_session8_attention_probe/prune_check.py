"""Every kernel plan logged under benchmarks/results: would dropping losing kernels (kernel_probe.losing) change its
ladders? Defaults as kernels.candidates orders them (native, int4, else linear)."""
import ast, collections, json, pathlib, re, sys
from common.modeling.kernel_probe import losing
from common.modeling.kernels import choose
seen, changed, n = set(), 0, 0
for path in pathlib.Path("benchmarks/results").rglob("*"):
    if not path.is_file() or path.suffix not in (".log", ".txt", ".json", ".jsonl"):
        continue
    try:
        text = path.read_text(errors="ignore")
    except OSError:
        continue
    for m in re.finditer(r"kernels chosen.*?timings_ms=(\{[^}]*\})", text):
        raw = m.group(1)
        if raw in seen:
            continue
        seen.add(raw)
        t = {tuple(k.split("/")): v for k, v in ast.literal_eval(raw).items()}
        t = {(f, int(r), k): v for (f, r, k), v in t.items()}
        pruned = {}
        for fmt in {f for f, _, _ in t}:
            behind, alive = {}, None
            for rows in sorted({r for f, r, _ in t if f == fmt}):
                best = {k: v for (f, r, k), v in t.items() if f == fmt and r == rows and (alive is None or k in alive)}
                pruned.update({(fmt, rows, k): v for k, v in best.items()})
                dropped, behind = losing(best, behind)
                alive = set(best) - dropped
        fmts = {f for f, _, _ in t}
        defaults = {"bfloat16": "linear", "lm_head": "linear", "int4": "int4", "int8": "linear"}
        kinds = {f: {k for g, _, k in t if g == f} for f in fmts}
        d = {f: ("native" if "native" in kinds[f] else "int4" if "int4" in kinds[f] else "linear") for f in fmts}
        n += 1
        a, b = choose(t, d), choose(pruned, d)
        if a != b:
            changed += 1
            print("CHANGED", path, a, b)
print(n, "distinct plans,", changed, "changed")
