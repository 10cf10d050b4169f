"""A tiny, randomly initialised ZImagePipeline built locally (no Hub access needed).

The folder written by :func:`build_tiny_zimage_pipeline` has the layout of ``Tongyi-MAI/Z-Image-Turbo``:
``model_index.json`` plus ``transformer`` (ZImageTransformer2DModel), ``text_encoder`` (Qwen3Model, the class the
Hub's model_index names), ``tokenizer`` (a Qwen2-style byte-level BPE with Qwen3's chat template), ``vae`` (the
FLUX.1 ``AutoencoderKL``, with its ``shift_factor``) and ``scheduler`` (FlowMatchEulerDiscreteScheduler, shift 3.0,
no dynamic shifting). Only widths and depths shrink, so LoRA target names (``layers.0.attention.to_q`` ...) and
the pipeline's prompt handling (chat template, second-to-last hidden state, variable caption length) are the real
ones.
"""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.data.synthetic.shapes import SHAPES_VALIDATION_PROMPT
from dit_lora.data.synthetic.tokenizers import TOKENIZER_CORPUS_EXTRA, demo_words
from dit_lora.kit import tiny
from dit_lora.kit.demo_file import DemoFile

#: the tiny configs and their reasons: ``demo.json`` beside this module
DEMO = DemoFile(__name__, keys=("resolution", "transformer", "vae", "text_encoder", "scheduler"))

#: Qwen3's chat template, the part ZImagePipeline uses: one user turn, then the generation prompt; with
#: ``enable_thinking`` false Qwen3 adds an empty think block (the pipeline passes true: nothing is added)
QWEN3_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)
#: Qwen3's special tokens the template and padding use (``<|endoftext|>`` pads, ``<|im_end|>`` ends a turn)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")

#: ``resolution`` (pixels), ``transformer``, ``vae``, ``text_encoder`` and ``scheduler``, as ``demo.json`` states them
TINY_ZIMAGE_CONFIG: dict[str, Any] = DEMO.read().variant("tiny")


def get_tiny_zimage_config() -> dict[str, Any]:
    """A deep copy of the tiny configs: ``resolution`` (pixels), ``transformer``, ``vae``, ``text_encoder``
    (Qwen3Config kwargs; the vocabulary is filled in at build time) and ``scheduler``."""
    return DEMO.read().variant("tiny")


def _corpus() -> list[str]:
    return demo_words(TOKENIZER_CORPUS_EXTRA, SHAPES_VALIDATION_PROMPT, ["user", "assistant"])


def build_tiny_qwen3_tokenizer():
    """A Qwen2-style byte-level BPE tokenizer (Qwen3's class, special tokens and chat template), trained offline on
    the demo's words; any other text still encodes, byte by byte."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import Qwen2TokenizerFast

    backend = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        min_frequency=1,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    words = _corpus()
    backend.train_from_iterator([" ".join(words), *words], trainer=trainer)
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return Qwen2TokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        chat_template=QWEN3_CHAT_TEMPLATE,
        padding_side="right",
        model_max_length=131072,
        clean_up_tokenization_spaces=False,
    )


def _init_pad_tokens(transformer: Any) -> None:
    # diffusers zero-initialises nothing that matters here, but the pad tokens start at zero: give them values
    # so a padding bug changes the output
    torch.nn.init.normal_(transformer.x_pad_token, std=0.02)
    torch.nn.init.normal_(transformer.cap_pad_token, std=0.02)


def _tiny(seed: int) -> tiny.TinyPipeline:
    """The tiny ZImagePipeline (fp32)."""
    config = get_tiny_zimage_config()
    vae = dict(config["vae"], scaling_factor=1.0, shift_factor=0.0)
    ids = {"pad_token_id": "pad_token_id", "eos_token_id": "eos_token_id"}
    return tiny.described(
        DEMO,
        "ZImagePipeline",
        seed,
        config,
        tokenizer=build_tiny_qwen3_tokenizer,
        parts=(
            tiny.module(
                "transformer", 1, "diffusers:ZImageTransformer2DModel", config["transformer"], then=_init_pad_tokens
            ),
            tiny.module(
                "vae",
                2,
                "diffusers:AutoencoderKL",
                vae,
                then=tiny.measured_scaling(TINY_ZIMAGE_CONFIG["resolution"], 0, shift=True),
            ),
            tiny.text_model(3, "transformers:Qwen3Model", "transformers:Qwen3Config", config["text_encoder"], ids),
        ),
    )


#: the tiny ZImagePipeline: its components in memory and the pipeline written to a folder, from ``seed``
#: (:func:`~dit_lora.kit.tiny.builders`)
build_tiny_zimage_components, build_tiny_zimage_pipeline = tiny.builders(_tiny)
