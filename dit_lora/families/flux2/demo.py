"""Tiny, randomly initialised FLUX.2 pipelines built locally (no Hub access needed).

Two variants, each the folder ``save_pretrained`` writes for the real release:

- ``"dev"``: a ``Flux2Pipeline`` (``black-forest-labs/FLUX.2-dev``): ``Flux2Transformer2DModel`` with the guidance
  embedding, a ``Mistral3ForConditionalGeneration`` text encoder and Mistral's tokenizer (the real ``PixtralProcessor``'s
  text half: see :func:`build_mistral_tokenizer`);
- ``"klein"``: a ``Flux2KleinPipeline`` (``FLUX.2-klein-base-4B``): no guidance embedding, a ``Qwen3ForCausalLM``
  text encoder and a ``Qwen2Tokenizer`` with a chat template.

Both share the ``AutoencoderKLFlux2`` (8x compression; its batch-norm statistics set from a few shapes images, as the
real VAE's normalise its patchified latents) and the scheduler config of the real repos. Module names (``to_q``,
``to_qkv_mlp_proj``, ``single_transformer_blocks.N.attn.to_out`` ...) are the real ones; only widths and depths
shrink. The tokenizers are trained offline on the demo captions (:mod:`dit_lora.data.synthetic`).
"""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.data.synthetic.shapes import SHAPES_VALIDATION_PROMPT
from dit_lora.data.synthetic.tokenizers import TOKENIZER_CORPUS_EXTRA, demo_words
from dit_lora.kit import tiny
from dit_lora.kit.demo_file import DemoFile

#: the variants' configs, their reasons and the scheduler's: ``demo.json`` beside this module
DEMO = DemoFile(
    __name__,
    keys=("resolution", "transformer", "vae", "text_encoder", "tokenizer"),
    shared=("scheduler",),
    what="tiny FLUX.2 variant",
)
_BF16 = torch.bfloat16

#: the scheduler config the FLUX.2 repos ship (FLUX.1-dev's, per diffusers' ``convert_flux2_to_diffusers.py``)
SCHEDULER_CONFIG: dict[str, Any] = DEMO.read().value("scheduler")

VARIANTS = tuple(DEMO.read().variants)


def tiny_configs(variant: str = "dev") -> dict[str, Any]:
    """The component configs of the tiny ``variant`` (a deep copy): ``transformer``, ``vae``, ``scheduler``,
    ``text_encoder`` (Mistral-3 text and vision parts, or Qwen3), ``tokenizer`` (its special tokens and chat template)
    and ``resolution``."""
    return {**DEMO.read().variant(variant), "scheduler": DEMO.read().value("scheduler")}


def _texts() -> tuple[str, ...]:
    """The demo words, joined and one by one: what both tokenizers' byte-level BPEs are trained on."""
    words = demo_words(TOKENIZER_CORPUS_EXTRA, SHAPES_VALIDATION_PROMPT, repeated=("system", "user", "assistant"))
    return (" ".join(words), *words)


def build_qwen_tokenizer():
    """A Qwen2 tokenizer (Qwen's byte-level BPE structure) with Qwen3's chat format, trained offline."""
    config = DEMO.read().variant("klein")["tokenizer"]
    specials = tuple(config["specials"])
    return tiny.qwen2_tokenizer(_texts(), 600, specials, learned_specials=True, chat_template=config["chat_template"])


def build_mistral_tokenizer():
    """Mistral-3's tokenizer as the pipeline uses it: a byte-level BPE with Mistral's instruction format, trained
    offline.

    The real repo's ``tokenizer`` folder is a ``PixtralProcessor``, which needs torchvision for its image half;
    ``Flux2Pipeline.encode_prompt`` sends it text only (``apply_chat_template`` over system and user turns), which
    the tokenizer alone renders and tokenizes the same way, so the tiny pipeline ships the tokenizer.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    config = DEMO.read().variant("dev")["tokenizer"]
    vocab, merges = tiny.byte_level_bpe(_texts(), 600, tuple(config["specials"]))
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    specials = {"additional_special_tokens": config["additional_special_tokens"], **config["special_tokens"]}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, padding_side="right", **specials)
    tokenizer.chat_template = config["chat_template"]
    return tokenizer


def set_latent_statistics(vae, resolution: int, seed: int) -> None:
    """The VAE's batch-norm running mean and variance from the patchified latents of a few shapes images.

    The real VAE's ``bn`` holds these statistics, and the pipelines normalise latents with them; a random VAE's
    are 0 and 1, which would leave that step untested.
    """
    from diffusers import Flux2Pipeline

    with torch.no_grad():
        latents = Flux2Pipeline._patchify_latents(vae.encode(tiny.shapes_pixels(resolution, seed)).latent_dist.mode())
    vae.bn.running_mean.copy_(latents.mean(dim=(0, 2, 3)))
    vae.bn.running_var.copy_(latents.var(dim=(0, 2, 3)))


def _tiny(variant: str, seed: int) -> tiny.TinyPipeline:
    """The tiny ``Flux2Pipeline`` (``"dev"``) or ``Flux2KleinPipeline`` (``"klein"``): transformer and text encoder in
    bf16, the VAE in fp32 with its latent statistics set."""
    config = tiny_configs(variant)
    if variant == "dev":
        # Mistral-3 (text and vision parts), its token ids the tokenizer's (``demo.json``)
        model, config_class = "transformers:Mistral3ForConditionalGeneration", "transformers:Mistral3Config"
        text = tiny.vision_language_model(3, model, config_class, dtype=_BF16, **config["text_encoder"])
    else:
        # Qwen3's padding token ends its sequences too
        ids = {"pad_token_id": "pad_token_id", "eos_token_id": "pad_token_id"}
        text = tiny.text_model(
            3, "transformers:Qwen3ForCausalLM", "transformers:Qwen3Config", config["text_encoder"], ids, dtype=_BF16
        )
    return tiny.described(
        DEMO,
        "Flux2Pipeline" if variant == "dev" else "Flux2KleinPipeline",
        seed,
        config,
        ("variant", variant),
        tokenizer=build_mistral_tokenizer if variant == "dev" else build_qwen_tokenizer,
        parts=(
            tiny.module("transformer", 1, "diffusers:Flux2Transformer2DModel", config["transformer"], dtype=_BF16),
            tiny.module(
                "vae",
                2,
                "diffusers:AutoencoderKLFlux2",
                config["vae"],
                then=lambda vae: set_latent_statistics(vae, config["resolution"], seed),
            ),
            text,
        ),
    )


#: the tiny Flux2Pipeline (``"dev"``) or Flux2KleinPipeline (``"klein"``, ``is_distilled`` false: a base model), the
#: transformer and text encoder in bf16, the VAE in fp32: its components in memory and the pipeline written to a
#: folder (:func:`~dit_lora.kit.tiny.builders`)
build_tiny_flux2_components, build_tiny_flux2_pipeline = tiny.builders(_tiny, "dev")
