"""A tiny, randomly initialised Lumina2Pipeline built locally (no Hub access needed).

The folder written by :func:`build_tiny_lumina2_pipeline` has the layout of ``Alpha-VLLM/Lumina-Image-2.0``:
``model_index.json`` plus ``transformer`` (Lumina2Transformer2DModel), ``text_encoder`` (Gemma2Model), ``tokenizer``
(a Gemma BPE), ``vae`` (the FLUX.1 ``AutoencoderKL``, with its ``shift_factor``) and ``scheduler``
(FlowMatchEulerDiscreteScheduler, shift 6.0, no dynamic shifting). Only widths and depths shrink, so LoRA target
names (``layers.0.attn.to_q`` ...) and the pipeline's prompt handling (system prompt, second-to-last hidden state,
the attention mask) are the real ones.
"""

from __future__ import annotations

from typing import Any

from dit_lora.data.synthetic.shapes import SHAPES_VALIDATION_PROMPT
from dit_lora.data.synthetic.tokenizers import TOKENIZER_CORPUS_EXTRA, build_tiny_gemma_tokenizer, demo_words
from dit_lora.kit import tiny
from dit_lora.kit.demo_file import DemoFile

#: the tiny configs and their reasons: ``demo.json`` beside this module
DEMO = DemoFile(__name__, keys=("resolution", "transformer", "vae", "text_encoder", "scheduler"))


def get_tiny_lumina2_config() -> dict[str, Any]:
    """A deep copy of the tiny configs: ``resolution`` (pixels), ``transformer``, ``vae``, ``text_encoder``
    (Gemma2Config kwargs; the vocabulary is filled in at build time) and ``scheduler``."""
    return DEMO.read().variant("tiny")


def latent_stride() -> int:
    """Pixels per transformer token side of the tiny model: the VAE's downsampling x the patch size (8 x 2)."""
    config = get_tiny_lumina2_config()
    return 2 ** (len(config["vae"]["block_out_channels"]) - 1) * int(config["transformer"]["patch_size"])


def build_tiny_tokenizer():
    """A tiny Gemma tokenizer whose merges are trained on the demo's words and Lumina2Pipeline's system prompt (read
    from the installed pipeline)."""
    from dit_lora.families.lumina2.encoders import PROMPT_START, default_system_prompt  # imports diffusers

    words = demo_words(TOKENIZER_CORPUS_EXTRA, SHAPES_VALIDATION_PROMPT, (default_system_prompt() + PROMPT_START))
    return build_tiny_gemma_tokenizer(words)


def _tiny(seed: int) -> tiny.TinyPipeline:
    """The tiny Lumina2Pipeline (fp32)."""
    config = get_tiny_lumina2_config()
    vae = dict(config["vae"], scaling_factor=1.0, shift_factor=0.0)
    gemma_ids = {key: key for key in ("pad_token_id", "bos_token_id", "eos_token_id")}
    return tiny.described(
        DEMO,
        "Lumina2Pipeline",
        seed,
        config,
        tokenizer=build_tiny_tokenizer,
        parts=(
            tiny.module("transformer", 1, "diffusers:Lumina2Transformer2DModel", config["transformer"]),
            tiny.module(
                "vae",
                2,
                "diffusers:AutoencoderKL",
                vae,
                then=tiny.measured_scaling(config["resolution"], 0, shift=True),
            ),
            tiny.text_model(
                3, "transformers:Gemma2Model", "transformers:Gemma2Config", config["text_encoder"], gemma_ids
            ),
        ),
    )


#: the tiny Lumina2Pipeline: its components in memory and the pipeline written to a folder, from ``seed``
#: (:func:`~dit_lora.kit.tiny.builders`)
build_tiny_lumina2_components, build_tiny_lumina2_pipeline = tiny.builders(_tiny)
