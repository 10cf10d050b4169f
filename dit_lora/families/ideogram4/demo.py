"""A tiny, randomly initialised Ideogram 4 pipeline built locally (no Hub access needed): an ``Ideogram4Pipeline``
(``ideogram-ai/ideogram-v4``'s folder as ``save_pretrained`` writes it) with its two transformers, a Qwen3-VL text
encoder 36 layers deep (the pipeline taps its hidden states at the module constant ``QWEN3_VL_ACTIVATION_LAYERS``,
up to layer 35) and a Qwen tokenizer with a chat template, trained offline on the demo captions, FLUX.2's VAE (its
batch-norm statistics measured on the patched latents of a few shapes pictures, as the pipeline packs them: not 0
and 1) and a scheduler without a shift of its own (the pipeline sets its sigmas). Module names are the real ones;
only widths shrink (``demo.json``)."""

from __future__ import annotations

import torch

from dit_lora.data.synthetic.shapes import SHAPES_VALIDATION_PROMPT
from dit_lora.data.synthetic.tokenizers import demo_words
from dit_lora.kit import tiny
from dit_lora.kit.demo_file import DemoFile

#: the tiny configs and their reasons: ``demo.json`` beside this module
DEMO = DemoFile(
    __name__,
    keys=("resolution", "transformer", "vae", "text", "vision", "tokenizer", "scheduler"),
    what="tiny Ideogram 4",
)


def build_tiny_ideogram4_tokenizer():
    """A byte-level BPE ``Qwen2Tokenizer`` with a Qwen chat template (text parts of a message's content), trained
    here on the chat turn and the demo captions."""
    config = DEMO.read().variant("v4")["tokenizer"]
    words = demo_words("user assistant", SHAPES_VALIDATION_PROMPT)
    return tiny.qwen2_tokenizer(words, 600, tuple(config["specials"]), chat_template=config["chat_template"])


def set_latent_statistics(vae, resolution: int, seed: int) -> None:
    """The VAE's batch-norm running mean and variance from a few shapes pictures' latents patched as Ideogram4Pipeline
    packs them (``(ph, pw, C)`` channels), so the normalisation is tested with statistics that are not 0 and 1."""
    from dit_lora.families.ideogram4.encoders import packed_latents

    vae.bn.running_mean.zero_()
    vae.bn.running_var.fill_(1.0 - vae.config.batch_norm_eps)
    with torch.no_grad():
        latents = packed_latents(vae, tiny.shapes_pixels(resolution, seed))
    vae.bn.running_mean.copy_(latents.mean(dim=(0, 2, 3)))
    vae.bn.running_var.copy_(latents.var(dim=(0, 2, 3)))


def _tiny(variant: str, seed: int) -> tiny.TinyPipeline:
    """The tiny ``Ideogram4Pipeline`` (fp32)."""
    config = DEMO.read().variant(variant)
    return tiny.described(
        DEMO, "Ideogram4Pipeline", seed, config, ("variant", variant),
        tokenizer=build_tiny_ideogram4_tokenizer,
        parts=(
            tiny.module("transformer", 1, "diffusers:Ideogram4Transformer2DModel", config["transformer"]),
            tiny.module("unconditional_transformer", 4, "diffusers:Ideogram4Transformer2DModel", config["transformer"]),
            tiny.module(
                "vae", 2, "diffusers:AutoencoderKLFlux2", config["vae"],
                then=lambda vae: set_latent_statistics(vae, config["resolution"], seed),
            ),
            tiny.qwen3_vl(3, config["text"], config["vision"]),
        ),
    )  # fmt: skip


#: the tiny Ideogram4Pipeline: its components in memory and the pipeline written to a folder
#: (:func:`~dit_lora.kit.tiny.builders`)
build_tiny_ideogram4_components, build_tiny_ideogram4_pipeline = tiny.builders(_tiny, "v4")
