"""``treespec generate``: in-process generation that streams text and reports MAL and tokens/s."""

from __future__ import annotations

import argparse
import sys
import time

from common.config import MAIN_QUANTIZATIONS, ConfigError, load_config


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt", required=True, help="prompt text")
    parser.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--tree-size", default=None, help="draft tree nodes, or 'auto' (default from config)")
    parser.add_argument("--no-spec", action="store_true", help="plain decoding (no draft model)")
    parser.add_argument("--config", default=None, help="TOML config file")
    parser.add_argument("--model-path", default=None, help="main model (packaged name, GGUF file or HF dir)")
    parser.add_argument("--draft-model-path", default=None)
    parser.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--main-quantization", default=None, choices=MAIN_QUANTIZATIONS,
                        help="quantized main model (CPU): weight-only int8 / int4, or w4a8 (int4 weights, "
                             "int8 activations); default from config: none")
    parser.add_argument("--device", default=None)


def encode_prompt(tok, text: str, chat: bool) -> list[int]:
    """Token ids of the prompt; with ``chat`` the template is applied once (no second BOS)."""
    if chat:
        text = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                       add_generation_prompt=True)
        return tok(text, add_special_tokens=False)["input_ids"]
    return tok(text)["input_ids"]


def run(args: argparse.Namespace) -> int:
    from common import wire
    from treespec.engine import build_local_engine
    if args.max_new_tokens < 1:
        print("treespec generate: --max-new-tokens must be at least 1", file=sys.stderr)
        return 2
    try:
        cfg = load_config(args.config, {
            "main_model_path": args.model_path, "draft_model_path": args.draft_model_path,
            "tree_size": 0 if args.no_spec else args.tree_size, "dtype": args.dtype, "device": args.device,
            "main_quantization": args.main_quantization})
        engine, tok = build_local_engine(cfg, slots=1)
    except (ConfigError, FileNotFoundError, ValueError) as exc:
        print(f"treespec generate: {exc}", file=sys.stderr)
        return 2
    params = wire.SamplingParams(max_tokens=args.max_new_tokens, temperature=args.temperature,
                                 top_p=args.top_p, top_k=args.top_k, seed=args.seed)
    ids = encode_prompt(tok, args.prompt, args.chat)
    out: list[int] = []
    shown = ""
    t0 = time.perf_counter()
    for delta in engine.generate("cli", ids, params):
        out += delta.tokens
        text = tok.decode(out, skip_special_tokens=True)
        if not text.endswith("\ufffd"):
            sys.stdout.write(text[len(shown):])
            sys.stdout.flush()
            shown = text
    secs = time.perf_counter() - t0
    rounds = engine.stats.committed[1:]  # decode rounds (the first, the prefill, commits one token)
    mal = sum(rounds) / max(len(rounds), 1)
    print(f"\n--- {len(out)} tokens in {secs:.2f} s: {len(out) / secs:.2f} tokens/s, "
          f"mean accepted length {mal:.2f} over {len(rounds)} decode verification steps "
          f"(tree_size={engine.tree_size})", file=sys.stderr)
    return 0
