"""A torch-free tokenizer: ``tokenizers`` (Rust) + the model's Jinja chat template.

``transformers.AutoTokenizer`` imports torch, which the gateway must not; this reads the
same ``tokenizer.json`` / ``tokenizer_config.json`` / ``chat_template.jinja`` files that
the model loader's converted cache (``<model dir>/.converted/<stem>-<size>-*/tokenizer``)
or an HF model directory holds. A GGUF model without a converted cache is converted once
in a child process (transformers + torch there, never here).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jinja2
import jinja2.sandbox
from tokenizers import Tokenizer as RustTokenizer

from common.models import resolve

TINY_PREFIX = "tiny-random:"  # tiny random models use the packaged Qwen tokenizer
PACKAGED_TOKENIZER_MODEL = "qwen2.5-coder-0.5b"
END_MARKERS = ("<|im_end|>", "<|endoftext|>")  # Qwen's end-of-turn / end-of-text tokens
CONVERT_TIMEOUT_S = 600


def converted_tokenizer_dir(path: Path) -> Path | None:
    """The newest converted-cache tokenizer directory for model file ``path``, if any."""
    if path.is_dir():
        return path if (path / "tokenizer.json").exists() else None
    found = sorted((path.parent / ".converted").glob(f"{path.stem}-{path.stat().st_size}-*"))
    dirs = [d / "tokenizer" for d in found if (d / "tokenizer" / "tokenizer.json").exists()]
    return dirs[-1] if dirs else None


def _convert_in_child(path: Path) -> Path:
    """Extract a GGUF file's tokenizer into the converted cache using a child process."""
    target = path.parent / ".converted" / f"{path.stem}-{path.stat().st_size}-tokenizer" / "tokenizer"
    code = ("import sys; from transformers import AutoTokenizer; "
            "AutoTokenizer.from_pretrained(sys.argv[1], gguf_file=sys.argv[2]).save_pretrained(sys.argv[3])")
    subprocess.run([sys.executable, "-c", code, str(path.parent), path.name, str(target)],
                   check=True, timeout=CONVERT_TIMEOUT_S, capture_output=True)
    return target


def tokenizer_dir(path_or_name: str, cache: str | None = None) -> Path:
    """Directory holding ``tokenizer.json`` for a model (packaged name, GGUF file, HF dir).

    Raises FileNotFoundError when the model is missing.
    """
    if path_or_name.startswith(TINY_PREFIX):
        path_or_name = PACKAGED_TOKENIZER_MODEL
    path = resolve(path_or_name, cache)
    return converted_tokenizer_dir(path) or _convert_in_child(path)


def _special(value) -> str | None:
    """A special token from tokenizer_config.json (a string or an AddedToken dict)."""
    return value.get("content") if isinstance(value, dict) else value


def _raise(message: str):
    raise ValueError(f"chat template error: {message}")


class Tokenizer:
    """Encode / decode text and apply the chat template, without torch."""

    def __init__(self, directory: str | Path):
        directory = Path(directory)
        self._tok = RustTokenizer.from_file(str(directory / "tokenizer.json"))
        cfg_path = directory / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
        template_file = directory / "chat_template.jinja"
        self.chat_template = template_file.read_text() if template_file.exists() else cfg.get("chat_template")
        self.bos_token = _special(cfg.get("bos_token"))
        self.eos_token = _special(cfg.get("eos_token"))
        self.eos_token_id = self._tok.token_to_id(self.eos_token) if self.eos_token else None
        self._template = self._compile(self.chat_template) if self.chat_template else None

    @staticmethod
    def _compile(source: str) -> jinja2.Template:
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = lambda x, indent=None, **_: json.dumps(x, ensure_ascii=False, indent=indent)
        env.globals["raise_exception"] = _raise
        return env.from_string(source)

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def end_token_ids(self) -> list[int]:
        """Ids that end generation: EOS plus Qwen's end-of-turn markers when present."""
        ids = {self.eos_token_id} if self.eos_token_id is not None else set()
        ids |= {i for i in (self._tok.token_to_id(t) for t in END_MARKERS) if i is not None}
        return sorted(ids)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            tools: list[dict] | None = None) -> str:
        """Render ``messages`` (and OpenAI-style ``tools``, when given) with the model's template.

        Raises ValueError without a template, or when the template itself raises.
        """
        if self._template is None:
            raise ValueError("this model's tokenizer has no chat template")
        try:
            return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                         tools=tools or None, bos_token=self.bos_token or "",
                                         eos_token=self.eos_token or "")
        except jinja2.TemplateError as exc:
            raise ValueError(f"chat template error: {exc}") from None


def load_tokenizer(path_or_name: str, cache: str | None = None) -> Tokenizer:
    """The torch-free tokenizer of a main model (``tiny-random:*`` -> packaged Qwen's)."""
    return Tokenizer(tokenizer_dir(path_or_name, cache))
