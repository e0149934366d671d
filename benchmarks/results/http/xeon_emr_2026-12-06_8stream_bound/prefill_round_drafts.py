"""Rounds of a scheduler log that prefilled new prompts (verify > 1.5 s) after a draft step (draft_ms > 0): the
running sequences' draft work that delayed those prompts' first token. python3 prefill_round_drafts.py LOG..."""
import gzip, json, sys
for f in sys.argv[1:]:
    rs = [json.loads(l) for l in (gzip.open if f.endswith('.gz') else open)(f, 'rt') if '"event": "round"' in l]
    big = [r for r in rs if r['verify_ms'] > 1500]
    hit = [round(r['draft_ms']) for r in big if r['draft_ms'] > 0]
    print(f"{f}: {len(big)} prefill rounds, {len(hit)} after draft work: {hit} ms")
