"""Seeded sampling reproducibility on a running gateway (issue 13, item 1).

Sends one seeded /v1/completions body alone, then the same body 4 times concurrently,
and prints the texts as JSON; run it against services started with --tree-size 0, 4 and
auto and compare the outputs (all must be identical).

    python scripts/seed_check.py --base-url http://127.0.0.1:18400/v1 --label tree4
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor

import openai

BODY = {"model": "treespec", "prompt": "def quicksort(items):\n", "max_tokens": 12, "temperature": 0.8, "seed": 42}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", default="http://127.0.0.1:18400/v1")
    ap.add_argument("--label", default="")
    ap.add_argument("--temperature", type=float, default=BODY["temperature"])
    args = ap.parse_args()
    body = {**BODY, "temperature": args.temperature}
    client = openai.OpenAI(base_url=args.base_url, api_key="none", max_retries=0, timeout=3000)
    send = lambda _: client.completions.create(**body).choices[0].text
    alone = send(0)
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(send, range(4)))
    print(json.dumps({"label": args.label, "body": body, "alone": alone, "concurrent": together,
                      "all_equal": len(set([alone] + together)) == 1}))


if __name__ == "__main__":
    main()
