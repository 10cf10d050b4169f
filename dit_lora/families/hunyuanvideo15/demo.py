"""Tiny, randomly initialised HunyuanVideo 1.5 pipelines built locally (no Hub access needed).

:func:`build_tiny_hunyuanvideo15_pipeline` writes what ``HunyuanVideo15Pipeline.save_pretrained`` (``"t2v"``) or
``HunyuanVideo15ImageToVideoPipeline.save_pretrained`` (``"i2v"``) write for diffusers' conversion of the published
checkpoints (``scripts/convert_hunyuan_video1_5_to_diffusers.py``): ``model_index.json`` plus ``transformer``
(``HunyuanVideo15Transformer3DModel``), ``vae`` (``AutoencoderKLHunyuanVideo15``: 16x spatial, 4x temporal, as the
real one), ``text_encoder`` (``Qwen2_5_VLTextModel``) and ``tokenizer`` (Qwen's byte-level BPE with a chat template),
``text_encoder_2`` (``T5EncoderModel``, ByT5's encoder) and ``tokenizer_2`` (``ByT5Tokenizer``: bytes, no vocabulary
file), ``scheduler`` (``FlowMatchEulerDiscreteScheduler``, the 480p shift) and ``guider``
(``ClassifierFreeGuidance``); image-to-video adds ``image_encoder`` (``SiglipVisionModel``) and
``feature_extractor`` (``SiglipImageProcessor``). LoRA target names (``attn.to_q``, ``attn.add_q_proj``,
``ff.net.0.proj`` ...) are the real ones; only widths and depths shrink (``demo.json``).

The VAE's ``scaling_factor`` is measured on moving-square clips at build time (the published 1.03682 is the real
VAE's), so the diffusion targets stay at about unit variance. The tiny tokenizer's merges are learnt on the
pipelines' system message, but it does not tokenize that message into the 108 tokens the pipelines crop (Qwen's real
vocabulary does): the tiny captions keep a tail of it, harmless for a random model. Weights are fp32.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dit_lora.data.synthetic.shapes import SHAPES_VALIDATION_PROMPT
from dit_lora.data.synthetic.tokenizers import demo_words
from dit_lora.kit import tiny
from dit_lora.kit.demo_file import DemoFile

#: the tiny configs, the tasks' pipelines and their reasons: ``demo.json`` beside this module
DEMO = DemoFile(
    __name__,
    keys=("pipeline", "task_type"),
    shared=(
        "geometry",
        "sampling_shift",
        "guidance_scale",
        "transformer",
        "vae",
        "text_encoder",
        "text_encoder_2",
        "image_encoder",
        "tokenizer",
    ),
)
TINY_VERSION = DEMO.read().version  # bump the file's version when configs, init or tokenizers change
TINY_GEOMETRY = DEMO.read().value("geometry")
PIPELINES = {task: variant["pipeline"] for task, variant in DEMO.read().table().items()}


def system_message() -> str:
    """The system message the pipelines wrap every caption in (the default of the installed pipeline's
    ``_get_mllm_prompt_embeds``, which ``__init__`` also sets: it follows diffusers)."""
    import inspect

    from diffusers import HunyuanVideo15Pipeline

    return inspect.signature(HunyuanVideo15Pipeline._get_mllm_prompt_embeds).parameters["system_message"].default


def build_tiny_qwen_tokenizer():
    """Qwen's byte-level BPE with its chat turns, merges learnt on the system message and the demo captions."""
    config = DEMO.read().value("tokenizer")
    words = demo_words("system user assistant " + system_message(), SHAPES_VALIDATION_PROMPT)
    return tiny.qwen2_tokenizer(words, 600, tuple(config["specials"]), chat_template=config["chat_template"])


def build_byt5_tokenizer():
    """ByT5's tokenizer: UTF-8 bytes and three special tokens, nothing to learn."""
    from transformers import ByT5Tokenizer

    return ByT5Tokenizer()


def _processors(components: dict[str, Any]) -> dict[str, Any]:
    """Image-to-video's ``feature_extractor``: SigLIP's processor at the tiny image encoder's size."""
    from transformers import SiglipImageProcessor

    size = DEMO.read().value("image_encoder")["image_size"]
    return {"feature_extractor": SiglipImageProcessor(size={"height": size, "width": size})}


def _vae_scaling(vae: Any) -> None:
    """The VAE's ``scaling_factor`` measured on moving-square clips (the pipelines multiply latents by it)."""
    import torch

    geometry = TINY_GEOMETRY
    clips = tiny.moving_square_clips(0, 4, geometry["num_frames"], geometry["height"], geometry["width"])
    vae.enable_slicing()  # one clip at a time: the VAE's attention mask takes a batch of one (diffusers 0.42.1)
    with torch.no_grad():
        latents = vae.encode(clips).latent_dist.mode()
    vae.disable_slicing()
    vae.register_to_config(scaling_factor=tiny.scaling_factor(latents))


def _tiny(task: str, seed: int) -> tiny.TinyPipeline:
    """The tiny pipeline of ``task`` (fp32): one transformer config, its ``task_type`` the checkpoint's."""
    if task not in PIPELINES:
        raise ValueError(f"unknown HunyuanVideo 1.5 demo task {task!r}; choose from {', '.join(PIPELINES)}")
    config = {key: DEMO.read().value(key) for key in DEMO.shared}
    variant = DEMO.read().variant(task)
    transformer = {**config["transformer"], "task_type": variant["task_type"]}
    i2v = task == "i2v"
    image_encoder = tiny.module(
        "image_encoder", 5, "transformers:SiglipVisionModel", config["image_encoder"],
        config_class="transformers:SiglipVisionConfig",
    )  # fmt: skip
    return tiny.described(
        DEMO,
        PIPELINES[task],
        seed,
        {"scheduler": {"shift": config["sampling_shift"]}},
        ("task", task),
        tokenizer=build_tiny_qwen_tokenizer,
        tokenizers={"tokenizer_2": build_byt5_tokenizer},
        parts=(
            tiny.module("transformer", 1, "diffusers:HunyuanVideo15Transformer3DModel", transformer),
            tiny.module("vae", 2, "diffusers:AutoencoderKLHunyuanVideo15", config["vae"], then=_vae_scaling),
            tiny.module(
                "text_encoder", 3, "transformers:Qwen2_5_VLTextModel", config["text_encoder"],
                config_class="transformers:Qwen2_5_VLTextConfig",
            ),
            tiny.text_model(
                4, "transformers:T5EncoderModel", "transformers:T5Config", config["text_encoder_2"], {},
                name="text_encoder_2", tokenizer="tokenizer_2",
            ),
            *((image_encoder,) if i2v else ()),
        ),
        processors=_processors if i2v else None,
        pipeline_kwargs={"guider": _guider(config["guidance_scale"])},
    )  # fmt: skip


def _guider(scale: float) -> Any:
    """The checkpoint's classifier-free guidance component."""
    from diffusers.guiders import ClassifierFreeGuidance

    return ClassifierFreeGuidance(guidance_scale=scale)


def build_tiny_hunyuanvideo15_pipeline(path: str | Path, *, task: str = "t2v", seed: int = 0) -> Path:
    """Write a randomly initialised HunyuanVideo 1.5 pipeline of ``task`` (``t2v``/``i2v``) to ``path`` and return it.

    Idempotent (same marker: nothing rewritten) and atomic (built in a sibling temporary folder and renamed); a
    folder we did not build is refused (``FileExistsError``), as the other tiny builders do."""
    return tiny.build_pipeline(path, _tiny(task, seed))


def build_tiny_hunyuanvideo15_components(task: str = "t2v", seed: int = 0) -> dict[str, Any]:
    """The pipeline's components in memory, randomly initialised from ``seed``, fp32 and in eval mode."""
    return tiny.build_components(_tiny(task, seed))
