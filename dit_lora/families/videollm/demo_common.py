"""What the tiny video-LLM builders (``demo_*.py``) share: the folder's marker, the language model's sizes, a seeded
model with a scaled output head, and the folder's files (bf16 weights, tokenizer, preprocessor JSON);
:func:`build_tiny_checkpoint` is the whole build of the InternVL3.5, Qwen3-VL and Qwen3-VL MoE folders."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dit_lora.data.synthetic import build_directory_atomically

__all__ = [
    "LM_HEAD_SCALE",
    "TINY_MARKER",
    "TINY_TEXT_SIZES",
    "build_tiny_checkpoint",
    "save_tiny_folder",
    "seeded_model",
]

#: the marker file of a tiny folder (its kind, seed and version: an identical one means nothing is rebuilt)
TINY_MARKER = "dit_lora_tiny.json"
#: A trained LM head separates tokens by many logits; random rows of std 0.02 after a unit RMSNorm cap every logit
#: near 1, so the loss could not fall below ~ln(vocab) - 2 whatever the LoRA learns. The head is scaled by this.
LM_HEAD_SCALE = 25.0
#: the tiny language models' sizes (grouped-query attention, 4 query / 2 key-value heads of 16)
TINY_TEXT_SIZES: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
}


def seeded_model(model_class: Any, config: Any, seed: int, head_scale: float | None = LM_HEAD_SCALE) -> Any:
    """``model_class(config)`` initialised from ``seed`` (the caller's torch RNG state restored afterwards), its
    ``lm_head`` scaled by ``head_scale`` (None: left as initialised)."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
    if head_scale is not None:
        with torch.no_grad():
            model.lm_head.weight.mul_(head_scale)
    return model


def save_tiny_folder(
    folder: Path, model: Any, tokenizer: Any, preprocessors: dict[str, dict[str, Any]], *, sort_keys: bool = False
) -> None:
    """Write ``model`` in bf16 (``save_pretrained``, safetensors), ``tokenizer`` and each preprocessor JSON
    (file name -> its keys) to ``folder``."""
    import torch

    module: torch.nn.Module = model  # as a Module: mypy reads PreTrainedModel.to's wrapper as a function
    module.to(torch.bfloat16)  # in place
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    for name, data in preprocessors.items():
        (folder / name).write_text(json.dumps(data, indent=2, sort_keys=sort_keys) + "\n")


def build_tiny_checkpoint(
    path: str | Path,
    *,
    kind: str,
    seed: int,
    version: int,
    model_class: str,
    tokenizer: Callable[[], Any],
    config: Callable[[Any], Any],
    preprocessor: dict[str, Any],
) -> Path:
    """Write a tiny checkpoint to ``path`` and return it: ``transformers.<model_class>`` of ``config(tokenizer())``
    seeded by ``seed``, its head scaled, a ``GenerationConfig`` of the text config's ids, the tokenizer and
    ``video_preprocessor_config.json``. Deterministic for a given ``seed``; idempotent (the marker holds ``kind``,
    ``seed`` and ``version``) and atomic like the other tiny builders."""
    marker = {"kind": kind, "seed": seed, "dtype": "bfloat16", "version": version}

    def build(tmp: Path) -> None:
        import transformers

        tok = tokenizer()
        full = config(tok)
        model = seeded_model(getattr(transformers, model_class), full, seed)
        text = full.text_config
        model.generation_config = transformers.GenerationConfig(
            bos_token_id=text.bos_token_id, eos_token_id=text.eos_token_id, pad_token_id=text.pad_token_id
        )
        save_tiny_folder(tmp, model, tok, {"video_preprocessor_config.json": preprocessor})

    return build_directory_atomically(path, TINY_MARKER, marker, build)
