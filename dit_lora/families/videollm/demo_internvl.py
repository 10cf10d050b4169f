"""A tiny, randomly initialised InternVL3.5 checkpoint built locally (no Hub access needed).

:func:`build_tiny_internvl` writes what ``OpenGVLab/InternVL3_5-*-HF`` ships, shrunk:

* ``config.json`` + ``model.safetensors`` (bf16) and ``generation_config.json`` from
  ``InternVLForConditionalGeneration.save_pretrained``: an InternViT tower (CLS token, absolute position
  embeddings, layer scale, mean pooling as published), the 2 x 2 pixel-shuffle projector (``downsample_ratio``
  0.5) and a Qwen3 language model (q/k RMSNorm, grouped-query attention);
* the tokenizer (``tokenizer.json`` / ``tokenizer_config.json``): the tiny Qwen byte-level BPE of
  :mod:`~dit_lora.families.videollm.demo_qwen` with InternVL's added tokens after Qwen's (``<img>``, ``</img>``,
  ``<IMG_CONTEXT>``, ``<quad>`` ... ``</box>``, ``<video>``) and the ``extra_special_tokens`` the HF repos name
  (``start_image_token``, ``end_image_token``, ``context_image_token``, ``video_token``), which
  ``InternVLProcessor`` reads;
* the HF repos' chat template (:data:`INTERNVL_CHAT_TEMPLATE`, transformers' ``convert_internvl_weights_to_hf.py``):
  ChatML turns, ``{"type": "video"}`` as ``<video>\\n``, no default system message;
* ``video_preprocessor_config.json`` with the published keys (``size`` height/width, ImageNet mean/std,
  bicubic), at 32 px;
* a ``dit_lora_tiny.json`` marker (:data:`TINY_INTERNVL_VERSION`).

Geometry: 32 px frames, 8 px patches (a 4 x 4 grid, the real 448 / 14 = 32 x 32), pixel-shuffled to 2 x 2 = 4
language-model tokens per frame (the real 256). The output head is scaled (as LLaVA's demo does) so a LoRA can move
the loss in a few dozen CPU steps; embeddings are untied for that (the 1B-4B checkpoints tie them, the 8B does not).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dit_lora.families.videollm.demo_common import TINY_TEXT_SIZES, build_tiny_checkpoint
from dit_lora.families.videollm.demo_qwen import build_tiny_qwen_tokenizer
from dit_lora.kit.demo_file import DemoFile

__all__ = [
    "INTERNVL_ADDED_TOKENS",
    "INTERNVL_CHAT_TEMPLATE",
    "TINY_INTERNVL_VERSION",
    "build_tiny_internvl",
    "build_tiny_internvl_tokenizer",
    "get_tiny_internvl_config",
]

#: the vision tower's, the language model's (beyond :data:`TINY_TEXT_SIZES`), the multimodal and the preprocessor's
#: configs, and their reasons: ``demo_internvl.json`` beside this module
DEMO = DemoFile(__name__, keys=("vision", "multimodal", "text", "preprocessor"), filename="demo_internvl.json")
TINY_INTERNVL_VERSION = DEMO.read().version  # bump the file's when the config, init, tokenizer or template change

#: InternVL's tokens after Qwen's, in the order of the HF repos' tokenizer
INTERNVL_ADDED_TOKENS = (
    "<img>",
    "</img>",
    "<IMG_CONTEXT>",
    "<quad>",
    "</quad>",
    "<ref>",
    "</ref>",
    "<box>",
    "</box>",
    "<video>",
)
#: the names ``InternVLProcessor`` reads from the tokenizer
EXTRA_SPECIAL_TOKENS = {
    "start_image_token": "<img>",
    "end_image_token": "</img>",
    "context_image_token": "<IMG_CONTEXT>",
    "video_token": "<video>",
}

# The HF repos' template (transformers' convert_internvl_weights_to_hf.py writes it to the tokenizer and processor).
INTERNVL_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\\n'}}"
    "{% if message['content'] is string %}"
    "{{ message['content'] }}"
    "{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}"
    "{{ '<IMG_CONTEXT>\\n' }}"
    "{% elif content['type'] == 'video' %}"
    "{{ '<video>\\n' }}"
    "{% elif content['type'] == 'text' %}"
    "{{ content['text'] }}"
    "{% endif %}"
    "{% endfor %}"
    "{% endif %}"
    "{{'<|im_end|>\\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{'<|im_start|>assistant\\n' }}"
    "{% endif %}"
)

#: the language model's config: :data:`TINY_TEXT_SIZES` and the file's ``text``
_TEXT: dict[str, Any] = {**TINY_TEXT_SIZES, **DEMO.read().variant("tiny")["text"]}


def build_tiny_internvl_tokenizer():
    """The tiny Qwen tokenizer with InternVL's added tokens and ``extra_special_tokens``, offline and deterministic."""
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast

    backend = build_tiny_qwen_tokenizer().backend_tokenizer
    backend.add_special_tokens(
        [AddedToken(t, special=True, normalized=False, lstrip=False, rstrip=False) for t in INTERNVL_ADDED_TOKENS]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        extra_special_tokens=dict(EXTRA_SPECIAL_TOKENS),
        chat_template=INTERNVL_CHAT_TEMPLATE,
        model_max_length=_TEXT["max_position_embeddings"],
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )


def get_tiny_internvl_config(tokenizer=None):
    """The tiny ``InternVLConfig``; token ids come from ``tokenizer`` (default: the tiny one)."""
    from transformers import InternVLConfig, InternVLVisionConfig, Qwen3Config

    tok = tokenizer if tokenizer is not None else build_tiny_internvl_tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_end|>", "<IMG_CONTEXT>")}
    text = Qwen3Config(
        **_TEXT,
        vocab_size=-(-len(tok) // 64) * 64,  # padded like the real vocabulary (151936)
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    return InternVLConfig(
        vision_config=InternVLVisionConfig(**DEMO.read().variant("tiny")["vision"]),
        text_config=text,
        image_token_id=ids["<IMG_CONTEXT>"],
        **DEMO.read().variant("tiny")["multimodal"],
    )


def build_tiny_internvl(path: str | Path, seed: int = 0) -> Path:
    """Write the tiny InternVL3.5 checkpoint (see the module docstring) to ``path`` and return it.

    Deterministic for a given ``seed``; idempotent (an identical marker means nothing is rewritten) and atomic,
    like the other tiny builders. Loads offline with ``InternVLForConditionalGeneration.from_pretrained(path)``.
    """
    return build_tiny_checkpoint(
        path,
        kind="internvl",
        seed=seed,
        version=TINY_INTERNVL_VERSION,
        model_class="InternVLForConditionalGeneration",
        tokenizer=build_tiny_internvl_tokenizer,
        config=get_tiny_internvl_config,
        preprocessor=DEMO.read().variant("tiny")["preprocessor"],
    )
