"""Service configuration: one frozen dataclass, loaded from TOML, env vars and flags.

Precedence (lowest to highest): defaults < TOML file < ``TREESPEC_<KEY>`` environment
variables < explicit overrides (command-line flags). Unknown keys and bad values raise
:class:`ConfigError` naming the key. Torch-free.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

ENV_PREFIX = "TREESPEC_"
AUTO = "auto"
MAX_LOOKUP_NGRAM = 64  # prompt_lookup_max_ngram bound (tokens)
MAX_LOOKUP_TOKENS = 256  # prompt_lookup_num_tokens bound (tree nodes)


class ConfigError(ValueError):
    """A configuration key is unknown or its value is invalid; the message names the key."""


MAIN_QUANTIZATIONS = ("none", "int8", "int4", "w4a8")  # main_quantization values (quant.quantize_main_weights)


@dataclass(frozen=True)
class Config:
    """Every key of the deployment guide plus endpoints, limits and security settings.

    ``tree_size``: ``"auto"`` (pick from measured verification cost, issue 7), an int
    number of draft-tree nodes, or 0 for plain decoding (speculation off).
    """

    main_model_path: str = "qwen2.5-coder-1.5b"  # packaged name or path to a GGUF file / HF dir
    draft_model_path: str = "qwen2.5-coder-0.5b"
    tree_size: int | str = AUTO
    max_accept_length: int = 12  # tokens; the draft tree's maximum depth
    tensor_parallel_size: int = 1
    dtype: str = "bfloat16"  # float32 | bfloat16 | float16
    device: str = "cpu"
    draft_vocab_size: int = 32768  # draft LM-head rows kept (FR-Spec); 0 = full vocabulary
    draft_quantization: str = "int4"  # int4 | int8 (CPU weight-only kernels) | none
    # none | int8 | int4 (weight-only) | w4a8 (int4 weights, int8 activations): a quantized main model
    # (CPU); speculation is lossless with respect to it
    main_quantization: str = "none"  # one of MAIN_QUANTIZATIONS
    # int4 main: keep a bf16 copy of its own dequantized weights, which the kernel plan runs multi-row
    # passes (tree verification, prefill) on where it measured them faster; false saves 2 bytes/weight.
    main_int4_dense: bool = True
    # Draft a tree in a sequence's first round too. Off (default): the first token comes from the
    # main model's prefill alone, so the draft's prefill is not in the time to first token.
    speculate_first_token: bool = False
    # The draft model sees a long prompt's first 32 tokens and its last draft_context_window ones
    # (StreamingLLM layout), so its prefill stays short; 0 = the whole prompt. Lossless either way.
    draft_context_window: int = 256
    kernel_probe: bool = True  # time matmul kernels on the loaded weights at start, use the fastest (CPU)
    prompt_lookup: bool = True  # prompt-lookup (n-gram) candidates join the draft tree (common/lookup.py)
    prompt_lookup_max_ngram: int = 4  # longest suffix n-gram searched for in the sequence
    prompt_lookup_min_ngram: int = 2  # shortest suffix n-gram that counts as a match
    prompt_lookup_num_tokens: int = 8  # most lookup tokens added to one sequence's tree per round
    overlap: str = AUTO  # draft/verify overlap: auto (on when draft and verifier have separate accelerators) | on | off
    host: str = "127.0.0.1"  # where the gateway's HTTP port and every service's probe port listen
    port: int = 8000
    metrics_port: int = 0  # scheduler/draft/verifier: /metrics, /livez, /readyz on this port; 0 = off
    scheduler_address: str = "tcp://127.0.0.1:5710"  # the scheduler binds, everyone connects
    scheduler_bind: str = ""  # bind address if different (e.g. tcp://0.0.0.0:5710 in compose)
    max_running: int = 8  # sequences per round (continuous batch)
    max_queue: int = 64  # waiting requests before 429/503
    max_model_len: int = 4096  # prompt + generated tokens per sequence
    kv_memory_bytes: int = 0  # KV pool budget per worker; 0 = from kv_memory_fraction
    kv_memory_fraction: float = 0.85  # of free memory, leaving headroom for tree KV
    prefix_cache: bool = True  # retain prompt/sequence KV blocks and reuse them across requests
    prefix_cache_block_size: int = 16  # tokens per prefix-cache block (the reuse granularity)
    grammar_fast_forward: bool = True  # draft: tokens a grammar forces go into the tree without drafting
    draft_replicas: int = 1
    verifier_replicas: int = 1
    heartbeat_interval_s: float = 1.0
    heartbeat_timeout_s: float = 5.0
    log_dir: str = "logs"
    log_level: str = "info"
    stats_log_interval_s: float = 10.0  # scheduler: an "engine stats" log line this often while busy; 0 = off
    api_keys_file: str = ""  # empty = no auth
    ip_allowlist: tuple[str, ...] = ()  # CIDRs; empty = all
    public_health: bool = True  # /health and /metrics without an API key
    rate_limit_rpm: int = 0  # requests/minute per key; 0 = unlimited
    rate_limit_tpm: int = 0  # tokens/minute per key; 0 = unlimited
    curve_dir: str = "auto"  # ZeroMQ CURVE keys, one pair per role; auto = ~/.config/treespec/control-plane
    insecure_control_plane: bool = False  # true = plaintext control plane, any peer trusted (logged warning)
    served_model_name: str = "treespec"
    served_model_aliases: tuple[str, ...] = ()  # further `model` names the API answers to
    trusted_proxies: tuple[str, ...] = ()  # CIDRs whose X-Forwarded-For header is believed
    allowed_hosts: tuple[str, ...] = ()  # Host names accepted with auth off (loopback names always)
    max_request_bytes: int = 1024 * 1024  # HTTP body cap, checked before parsing
    max_connections: int = 512  # open client connections per gateway; more are closed at once
    header_timeout_s: float = 10.0  # a request's headers must arrive within this after connect/last answer
    read_timeout_s: float = 30.0  # a request body must arrive within this

    def __post_init__(self) -> None:
        _validate(self)


_FIELDS = {f.name: f for f in dataclasses.fields(Config)}


def _validate(cfg: Config) -> None:
    """Raise ConfigError for the first out-of-range key."""
    ts = cfg.tree_size
    if not (ts == AUTO or (isinstance(ts, int) and 0 <= ts <= 1024)):
        raise ConfigError(f"tree_size must be 'auto' or an integer in 0..1024, got {ts!r}")
    checks = {
        "max_accept_length": 1 <= cfg.max_accept_length <= 64,
        "tensor_parallel_size": 1 <= cfg.tensor_parallel_size <= 64,
        "port": 0 <= cfg.port <= 65535,
        "metrics_port": 0 <= cfg.metrics_port <= 65535,
        "max_running": cfg.max_running >= 1,
        "stats_log_interval_s": cfg.stats_log_interval_s >= 0,
        "max_queue": cfg.max_queue >= 0,
        "max_model_len": cfg.max_model_len >= 16,
        "draft_context_window": cfg.draft_context_window >= 0,
        "kv_memory_fraction": 0.05 <= cfg.kv_memory_fraction <= 0.95,
        "prefix_cache_block_size": 1 <= cfg.prefix_cache_block_size <= 1024,
        "dtype": cfg.dtype in ("float32", "bfloat16", "float16"),
        "draft_quantization": cfg.draft_quantization in ("int4", "int8", "none"),
        "main_quantization": cfg.main_quantization in MAIN_QUANTIZATIONS,
        "overlap": cfg.overlap in (AUTO, "on", "off"),
        "prompt_lookup_max_ngram": 1 <= cfg.prompt_lookup_max_ngram <= MAX_LOOKUP_NGRAM,
        "prompt_lookup_min_ngram": 1 <= cfg.prompt_lookup_min_ngram <= cfg.prompt_lookup_max_ngram,
        "prompt_lookup_num_tokens": 1 <= cfg.prompt_lookup_num_tokens <= MAX_LOOKUP_TOKENS,
        "draft_replicas": cfg.draft_replicas >= 1,
        "verifier_replicas": cfg.verifier_replicas >= 1,
        "draft_vocab_size": cfg.draft_vocab_size >= 0,
        "log_level": cfg.log_level in ("debug", "info", "warning", "error"),
        "max_request_bytes": cfg.max_request_bytes >= 1024,
        "max_connections": cfg.max_connections >= 1,
        "header_timeout_s": cfg.header_timeout_s > 0,
        "read_timeout_s": cfg.read_timeout_s > 0,
    }
    for key, ok in checks.items():
        if not ok:
            raise ConfigError(f"invalid value for {key}: {getattr(cfg, key)!r}")
    _validate_main_quantization(cfg)


def _validate_main_quantization(cfg: Config) -> None:
    """A quantized main model runs on torch's CPU weight-only kernels and one verifier rank."""
    q = cfg.main_quantization
    if q == "none":
        return
    if cfg.device != "cpu":
        raise ConfigError(f"main_quantization={q} needs device=cpu (torch's CPU weight-only kernels), "
                          f"got device={cfg.device!r}; use main_quantization=none on accelerators")
    if q == "w4a8":
        _validate_w4a8(cfg)
    if cfg.tensor_parallel_size > 1:
        raise ConfigError(f"main_quantization={q} cannot be combined with tensor_parallel_size="
                          f"{cfg.tensor_parallel_size} (quantized weights are not sharded); "
                          "set one of them to none / 1")


def _validate_w4a8(cfg: Config) -> None:
    """w4a8's exact attention kernel takes bf16 or fp32. The host checks (AVX512-VNNI or AVX2, g++) are the
    verifier worker's, where the kernel is built (``quant.quantize_main_weights``): the gateway and
    scheduler load this config too, possibly on other machines or images without a compiler."""
    if cfg.dtype == "float16":
        raise ConfigError("main_quantization=w4a8 needs dtype bfloat16 or float32 (its exact attention kernel), "
                          "got float16")


def _coerce(key: str, value: Any) -> Any:
    """Convert a TOML/env/flag value to the field's type; raise ConfigError naming the key."""
    default = _FIELDS[key].default
    try:
        if key == "tree_size":
            return AUTO if str(value).strip().lower() == AUTO else int(value)
        if key == "overlap":
            word = str(value).strip().lower()
            return {"true": "on", "1": "on", "yes": "on", "false": "off", "0": "off", "no": "off"}.get(word, word)
        if isinstance(default, bool):
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("1", "true", "yes", "on"):
                return True
            if str(value).lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if isinstance(default, tuple):
            items = value if isinstance(value, (list, tuple)) else str(value).split(",")
            return tuple(str(v).strip() for v in items if str(v).strip())
        if isinstance(default, int):
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
        if isinstance(default, float):
            return float(value)
        return str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid value for {key}: {value!r}") from exc


def load_config(
    path: str | os.PathLike | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Build a Config from defaults, a TOML file, environment variables and overrides.

    Raises ConfigError for an unreadable file, unknown keys (named) or invalid values.
    ``None`` values in ``overrides`` are ignored (unset command-line flags).
    """
    values: dict[str, Any] = {}
    if path:
        try:
            data = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
        data = data.get("treespec", data)
        unknown = sorted(set(data) - set(_FIELDS))
        if unknown:
            raise ConfigError(f"unknown config key(s) in {path}: {', '.join(unknown)}")
        values.update({k: _coerce(k, v) for k, v in data.items()})
    env = os.environ if environ is None else environ
    for name, raw in env.items():
        if name.startswith(ENV_PREFIX):
            key = name[len(ENV_PREFIX):].lower()
            if key in _FIELDS:
                values[key] = _coerce(key, raw)
    for key, value in (overrides or {}).items():
        if key not in _FIELDS:
            raise ConfigError(f"unknown config key: {key}")
        if value is not None:
            values[key] = _coerce(key, value)
    return Config(**values)


def env_var(key: str) -> str:
    """The environment variable that sets config ``key`` (e.g. TREESPEC_TREE_SIZE)."""
    if key not in _FIELDS:
        raise ConfigError(f"unknown config key: {key}")
    return ENV_PREFIX + key.upper()


def config_keys() -> list[tuple[str, Any, str]]:
    """(key, default, env var) for every key: the README's configuration table."""
    return [(k, f.default, env_var(k)) for k, f in _FIELDS.items()]
