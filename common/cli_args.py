"""Command-line flags shared by the service subcommands (scheduler, draft, verifier, up).

Torch-free. Flags override the TOML file and ``TREESPEC_*`` variables (see config.py).
"""

from __future__ import annotations

import argparse
import sys

from common.config import Config, ConfigError, load_config

FLAG_KEYS = {  # flag dest -> config key
    "model_path": "main_model_path",
    "draft_model_path": "draft_model_path",
    "tree_size": "tree_size",
    "port": "port",
    "tensor_parallel_size": "tensor_parallel_size",
    "scheduler_address": "scheduler_address",
    "log_level": "log_level",
    "device": "device",
    "dtype": "dtype",
    "main_quantization": "main_quantization",
    "prompt_lookup": "prompt_lookup",
    "prompt_lookup_num_tokens": "prompt_lookup_num_tokens",
}


def add_config_args(parser: argparse.ArgumentParser) -> None:
    """--config PATH, the common overrides, and --set KEY=VALUE for any other key."""
    parser.add_argument("--config", help="TOML config file")
    parser.add_argument("--model-path", help="main model: packaged name, GGUF file, HF dir or tiny-random:<seed>")
    parser.add_argument("--draft-model-path", help="draft model (same forms as --model-path)")
    parser.add_argument("--tree-size", help="draft tree nodes: auto, N, or 0 for plain decoding")
    parser.add_argument("--port", type=int, help="gateway HTTP port")
    parser.add_argument("--tensor-parallel-size", type=int, help="verifier tensor-parallel ranks")
    parser.add_argument("--scheduler-address", help="ZeroMQ address of the scheduler, e.g. tcp://127.0.0.1:5710")
    parser.add_argument("--log-level", help="debug | info | warning | error")
    parser.add_argument("--device", help="cpu | cuda | cuda:N")
    parser.add_argument("--dtype", help="float32 | bfloat16 | float16")
    parser.add_argument("--main-quantization", help="none | int8 | int4 (weight-only) | w4a8 (int4 weights, int8 activations): quantized main model (CPU)")
    parser.add_argument("--prompt-lookup", help="on | off: prompt-lookup (n-gram) candidates in the draft tree")
    parser.add_argument("--prompt-lookup-num-tokens", type=int, help="most prompt-lookup tree nodes per round")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any other config key (repeatable)")


def config_from_args(args: argparse.Namespace) -> Config:
    """Build the Config; raises ConfigError naming a bad key or value."""
    overrides = {key: getattr(args, dest, None) for dest, key in FLAG_KEYS.items()}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    return load_config(args.config, overrides)


def config_or_report(args: argparse.Namespace, command: str) -> Config | None:
    """``config_from_args``, or None after printing ``treespec <command>: <problem>`` to
    stderr (callers then exit with status 2)."""
    try:
        return config_from_args(args)
    except ConfigError as exc:
        print(f"treespec {command}: {exc}", file=sys.stderr)
        return None
