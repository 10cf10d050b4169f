"""A tiny, randomly initialised Qwen3-VL checkpoint built locally (no Hub access needed).

:func:`build_tiny_qwen3_vl` writes what ``Qwen/Qwen3-VL-*-Instruct`` ships, shrunk:

* ``config.json`` + ``model.safetensors`` (bf16) and ``generation_config.json`` from
  ``Qwen3VLForConditionalGeneration.save_pretrained``: the vision tower (16 px patches, a learned position grid
  interpolated to each clip, 2 x 2 merger, one DeepStack merger), and a Qwen3 language model with q/k RMSNorm and
  interleaved M-RoPE;
* the tokenizer: the tiny Qwen byte-level BPE of :mod:`~dit_lora.families.videollm.demo_qwen` (Qwen's special
  tokens in Qwen's order) with the Qwen3-VL Instruct template (:data:`QWEN3_VL_CHAT_TEMPLATE`);
* ``video_preprocessor_config.json`` with the published keys (``size`` as pixel counts, mean = std = 0.5, 16 px
  patches), with a pixel budget that keeps the 64 px demo clips at 64 px;
* a ``dit_lora_tiny.json`` marker (:data:`TINY_QWEN3_VL_VERSION`).

Geometry: 64 px frames, 16 px patches (4 x 4), merged 2 x 2 to 4 language-model tokens per pair of frames.
DeepStack feeds the first block's merged features into the first language-model layer (the real models: blocks
8/16/24 into layers 0-2). The output head is scaled (as LLaVA's demo does) so a LoRA moves the loss in a few dozen
CPU steps; embeddings are untied for that (the 2B/4B checkpoints tie them, 8B/32B do not).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dit_lora.families.videollm.demo_common import TINY_TEXT_SIZES, build_tiny_checkpoint
from dit_lora.families.videollm.demo_qwen import (
    QWEN2_5_VL_CHAT_TEMPLATE,
    QWEN2_5_VL_DEFAULT_SYSTEM,
    QWEN_SPECIAL_TOKENS,
    build_tiny_qwen_tokenizer,
)
from dit_lora.kit.demo_file import DemoFile

__all__ = [
    "QWEN3_VL_CHAT_TEMPLATE",
    "QWEN3_VL_PREPROCESSOR",
    "TINY_QWEN3_VL_VERSION",
    "build_tiny_qwen3_vl",
    "build_tiny_qwen3_vl_tokenizer",
    "get_tiny_qwen3_vl_config",
]

#: the language model's (beyond :data:`TINY_TEXT_SIZES`), the vision tower's and the preprocessor's configs, and their
#: reasons: ``demo_qwen3_vl.json`` beside this module
DEMO = DemoFile(__name__, keys=("text", "vision", "preprocessor"), filename="demo_qwen3_vl.json")
TINY_QWEN3_VL_VERSION = DEMO.read().version  # bump the file's when the config, init, tokenizer or template change

# The Instruct repos' chat_template.json, its tool-call branches left out: Qwen2.5-VL's without its default system
# message; ChatML turns, {"type": "video"} as <|vision_start|><|video_pad|><|vision_end|>.
QWEN3_VL_CHAT_TEMPLATE = QWEN2_5_VL_CHAT_TEMPLATE.replace(QWEN2_5_VL_DEFAULT_SYSTEM, "")

_TEXT: dict[str, Any] = {**TINY_TEXT_SIZES, **DEMO.read().variant("tiny")["text"]}
#: the published keys; ``size`` is a pixel budget over the whole clip (8 frames of 64 x 64 = 32768 stay as they are)
QWEN3_VL_PREPROCESSOR: dict[str, Any] = DEMO.read().variant("tiny")["preprocessor"]


def build_tiny_qwen3_vl_tokenizer():
    """The tiny Qwen tokenizer with the Qwen3-VL Instruct template (:data:`QWEN3_VL_CHAT_TEMPLATE`)."""
    tok = build_tiny_qwen_tokenizer()
    tok.chat_template = QWEN3_VL_CHAT_TEMPLATE
    return tok


def get_tiny_qwen3_vl_config(tokenizer=None):
    """The tiny ``Qwen3VLConfig``; token ids come from ``tokenizer`` (default: the tiny Qwen one)."""
    from transformers import Qwen3VLConfig

    tok = tokenizer if tokenizer is not None else build_tiny_qwen_tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS}
    text = dict(
        _TEXT,
        vocab_size=-(-len(tok) // 64) * 64,  # padded like the real vocabulary (151936)
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        tie_word_embeddings=False,
    )
    return Qwen3VLConfig(
        text_config=text,
        vision_config=dict(DEMO.read().variant("tiny")["vision"], out_hidden_size=_TEXT["hidden_size"]),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )


def build_tiny_qwen3_vl(path: str | Path, seed: int = 0) -> Path:
    """Write the tiny Qwen3-VL checkpoint (see the module docstring) to ``path`` and return it.

    Deterministic for a given ``seed``; idempotent (an identical marker means nothing is rewritten) and atomic,
    like the other tiny builders. Loads offline with ``Qwen3VLForConditionalGeneration.from_pretrained(path)``.
    """
    return build_tiny_checkpoint(
        path,
        kind="qwen3_vl",
        seed=seed,
        version=TINY_QWEN3_VL_VERSION,
        model_class="Qwen3VLForConditionalGeneration",
        tokenizer=build_tiny_qwen3_vl_tokenizer,
        config=get_tiny_qwen3_vl_config,
        preprocessor=QWEN3_VL_PREPROCESSOR,
    )
