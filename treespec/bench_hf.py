"""Hugging Face transformers baselines for ``treespec bench``: plain ``generate`` and
assisted generation (``assistant_model=``, Leviathan et al. 2023 chain speculation)."""

from __future__ import annotations

import time

import torch

from common.models import resolve
from common.modeling.loader import DTYPES
from treespec.bench_run import Run


def load_hf(path_or_name: str, dtype: str):
    """A transformers model for a packaged name, GGUF file or HF directory."""
    from transformers import AutoModelForCausalLM
    path = resolve(path_or_name)
    kw = {"gguf_file": path.name} if path.is_file() else {}
    model = AutoModelForCausalLM.from_pretrained(path.parent if path.is_file() else path,
                                                 dtype=DTYPES[dtype], **kw)
    return model.eval()


@torch.inference_mode()
def hf_generate(model, prompt: list[int], max_new: int, eos: set[int], assistant=None) -> Run:
    """Greedy HF generation (assisted when ``assistant`` is given); seconds include prefill."""
    ids = torch.tensor([prompt])
    kw = {"assistant_model": assistant} if assistant is not None else {}
    t0 = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new,
                         min_new_tokens=0, eos_token_id=sorted(eos), pad_token_id=sorted(eos)[0], **kw)
    secs = time.perf_counter() - t0
    return Run(out[0, len(prompt):].tolist(), secs, 0.0)
