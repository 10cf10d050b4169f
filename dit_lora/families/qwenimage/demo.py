"""Tiny, randomly initialised Qwen-Image pipelines built locally (no Hub access needed).

:func:`build_tiny_qwenimage_pipeline` writes what ``QwenImagePipeline.save_pretrained`` writes for ``Qwen/Qwen-Image``
(``model_index.json``, ``transformer`` (QwenImageTransformer2DModel, bf16), ``text_encoder``
(Qwen2_5_VLForConditionalGeneration, bf16), ``vae`` (AutoencoderKLQwenImage, fp32), ``scheduler``
(FlowMatchEulerDiscreteScheduler with the real dynamic-shift config) and ``tokenizer`` (Qwen2Tokenizer)), only
narrow and shallow, so the LoRA target names (``to_q``, ``add_q_proj``, ``img_mlp.net.2`` ...) are the real ones. The
Edit variants add ``processor/`` (Qwen2VLProcessor: the text encoder sees the control images) and name
``QwenImageEditPipeline`` / ``QwenImageEditPlusPipeline`` in ``model_index.json``.

The structure follows the diffusers tests of the Qwen-Image pipelines (``tests/pipelines/qwenimage``): VAE base
width ``6 x z_dim``, three downsamples (8x, as the real VAE), a patch size of 2 so ``in_channels = 4 x z_dim``.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch

from dit_lora.data.synthetic.shapes import SHAPES_VALIDATION_PROMPT
from dit_lora.data.synthetic.tokenizers import demo_words
from dit_lora.families.qwenimage.processor import image_only_processor, save_processor
from dit_lora.kit import tiny
from dit_lora.kit.demo_file import DemoFile

__all__ = [
    "EDIT_PIPELINES",
    "TINY_QWENIMAGE_VERSION",
    "build_tiny_qwen_tokenizer",
    "build_tiny_qwenimage_components",
    "build_tiny_qwenimage_pipeline",
    "tiny_qwenimage_config",
]

#: the tiny configs, the scheduler's, the Edit processor's and their reasons: ``demo.json`` beside this module
DEMO = DemoFile(
    __name__,
    keys=("pipeline",),
    shared=("resolution", "transformer", "vae", "text", "vision", "scheduler", "processor_image"),
)
# Bump the file's version whenever the configs, the init or the tokenizer change: cached builds with another version
# are rebuilt.
TINY_QWENIMAGE_VERSION = DEMO.read().version
_BF16 = torch.bfloat16

#: the pipeline class of each demo variant
EDIT_PIPELINES = {variant: found["pipeline"] for variant, found in DEMO.read().table().items()}
#: Qwen/Qwen-Image's scheduler_config.json (dynamic shift from the image's token count)
SCHEDULER_CONFIG = DEMO.read().value("scheduler")
_SPECIAL = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)


def tiny_qwenimage_config() -> dict[str, Any]:
    """A copy of the tiny configs: ``resolution``, ``transformer``, ``vae``, ``text``, ``vision``, ``scheduler``."""
    return {key: DEMO.read().value(key) for key in ("resolution", "transformer", "vae", "text", "vision", "scheduler")}


def prompt_template(pipeline_class: type) -> str:
    """The prompt template a Qwen-Image pipeline class encodes captions with (``prompt_template_encode``)."""
    kwargs = dict.fromkeys(("scheduler", "vae", "text_encoder", "tokenizer", "transformer"))
    if "processor" in inspect.signature(pipeline_class).parameters:
        kwargs["processor"] = None
    return pipeline_class(**kwargs).prompt_template_encode


def _corpus() -> list[str]:
    """The prompt templates of the three pipelines and the demo captions: what the tiny tokenizer learns merges on."""
    from diffusers import QwenImageEditPipeline, QwenImageEditPlusPipeline, QwenImagePipeline

    classes = (QwenImagePipeline, QwenImageEditPipeline, QwenImageEditPlusPipeline)
    templates = " ".join(prompt_template(cls) for cls in classes)
    return demo_words(templates, SHAPES_VALIDATION_PROMPT, repeated=("Picture", "1:", "2:"))


def build_tiny_qwen_tokenizer():
    """A byte-level BPE ``Qwen2Tokenizer`` (Qwen2's pre-tokenizer, built from a vocabulary and merges trained here on the
    pipelines' prompt templates and the demo captions) with Qwen's chat and vision special tokens."""
    return tiny.qwen2_tokenizer(_corpus(), 700, _SPECIAL)


def _processor(components: dict[str, Any]) -> dict[str, Any]:
    """The Edit variants' ``processor``: the text encoder sees the control images through it."""
    from transformers import Qwen2VLImageProcessor

    image_processor = Qwen2VLImageProcessor(
        **{k: v for k, v in DEMO.read().value("processor_image").items() if "_type" not in k}
    )
    return {"processor": image_only_processor(image_processor, components["tokenizer"])}


def _tiny(variant: str, seed: int) -> tiny.TinyPipeline:
    """The tiny Qwen-Image pipeline of ``variant``: transformer and text encoder in bf16, the VAE in fp32; the Edit
    variants save a ``QwenImagePipeline`` and then name their own class and ``processor/`` in ``model_index.json``."""
    if variant not in EDIT_PIPELINES:
        raise ValueError(f"unknown Qwen-Image demo variant {variant!r}; choose from {sorted(EDIT_PIPELINES)}")
    config = tiny_qwenimage_config()

    def save_edit_files(folder: Path, components: dict[str, Any]) -> None:
        save_processor(components["processor"], folder / "processor")
        change = {"_class_name": EDIT_PIPELINES[variant], "processor": ["transformers", "Qwen2VLProcessor"]}
        tiny.rewrite_json(folder / "model_index.json", lambda index: index.update(change), sort_keys=True)

    edit = variant != "t2i"
    return tiny.described(
        DEMO,
        "QwenImagePipeline",
        seed,
        config,
        ("variant", variant),
        tokenizer=build_tiny_qwen_tokenizer,
        parts=(
            tiny.module("transformer", 1, "diffusers:QwenImageTransformer2DModel", config["transformer"], dtype=_BF16),
            tiny.module("vae", 2, "diffusers:AutoencoderKLQwenImage", config["vae"]),
            tiny.vision_language_model(
                3,
                "transformers:Qwen2_5_VLForConditionalGeneration",
                "transformers:Qwen2_5_VLConfig",
                text_config=config["text"],
                vision_config=config["vision"],
                tokens={
                    "image_token_id": "<|image_pad|>",
                    "video_token_id": "<|video_pad|>",
                    "vision_start_token_id": "<|vision_start|>",
                    "vision_end_token_id": "<|vision_end|>",
                },
                text_tokens={"bos_token_id": "<|endoftext|>", "eos_token_id": "<|im_end|>"},
                dtype=_BF16,
                tie_word_embeddings=False,
            ),
        ),
        processors=_processor if edit else None,
        apart=("processor",),
        after_save=save_edit_files if edit else None,
    )


#: the tiny Qwen-Image pipeline (``"edit"``, ``"edit_plus"``: the Edit models', with their ``processor``), the
#: transformer and text encoder in bf16, the VAE in fp32: its components in memory and the pipeline written to a
#: folder (:func:`~dit_lora.kit.tiny.builders`)
build_tiny_qwenimage_components, build_tiny_qwenimage_pipeline = tiny.builders(_tiny, "t2i")
