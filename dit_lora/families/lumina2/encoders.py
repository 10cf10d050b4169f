"""Lumina 2's encoders: the FLUX.1 VAE's shifted and scaled latents (the kit's), Gemma-2 caption embeddings through
Lumina2Pipeline's own ``encode_prompt`` (the system prompt and ``" <Prompt Start> "`` before every caption, the
second-to-last hidden state, the attention mask), and the run's text settings."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionEncoders
from dit_lora.families.diffusion.prompts import MASKED, CaptionLength, caption_length, pipeline_prompts
from dit_lora.families.diffusion.text_conditioned import encoder_identity

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: ``--max_sequence_length``, else Lumina2Pipeline's default, 256 (the system prompt's tokens count in it)
max_sequence_length = CaptionLength(256)
#: what Lumina2Pipeline.encode_prompt puts between the system prompt and the caption
PROMPT_START = " <Prompt Start> "


@cache
def default_system_prompt() -> str:
    """Lumina2Pipeline's own system prompt (set in its ``__init__``: read from an instance without components, so
    it follows the installed diffusers)."""
    from dit_lora.families.diffusion.loader import model_class  # imports diffusers: only when asked

    pipeline = model_class("diffusers", "Lumina2Pipeline")(
        transformer=None, scheduler=None, vae=None, text_encoder=None, tokenizer=None
    )
    return str(pipeline.system_prompt)


def system_prompt(cfg: TrainConfig) -> str:
    """``--system_prompt``, else the pipeline's own."""
    return cfg.family_options.system_prompt or default_system_prompt()


def recorded_system_prompt(text: TextSettings | None) -> str | None:
    """The system prompt the run's text settings record (None before they are recorded: the pipeline's own)."""
    return text.instruction[0] if text and text.instruction else None


class Lumina2Encoders(DiffusionEncoders):
    """``FamilySpec.encoders``: the cache's encoders (images: the kit's, the FLUX.1 VAE's shift and scale as
    Lumina2Pipeline undoes them before decoding), and (``PromptText``) how a run encodes captions."""

    def text_settings(self, cfg: TrainConfig) -> TextSettings:
        """The run's caption length and system prompt (which the length counts, before every caption)."""
        prompt = system_prompt(cfg)
        return TextSettings(
            max_sequence_length=max_sequence_length(cfg), instruction=(prompt,), prefix=prompt + PROMPT_START
        )

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """The model, its stamp, revision, variant, text dtype, caption length and system prompt (and a quantized
        encoder)."""
        return encoder_identity(
            cfg, "lumina2", max_sequence_length=max_sequence_length(cfg), system_prompt=system_prompt(cfg)
        )

    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """Captions (and their masks) through Lumina2Pipeline's own ``encode_prompt`` at the run's settings; the
        empty caption, without the system prompt (as the pipeline encodes its negative), as the negative. Beside
        them each caption's token count on the host (``prompt_lengths``: :func:`host_lengths`)."""
        text = comps.state.text if comps.state is not None else None
        length = caption_length(text, max_sequence_length.default)
        system = recorded_system_prompt(text)
        out = pipeline_prompts(
            comps,
            "Lumina2Pipeline",
            captions,
            with_negative=with_negative,
            keys=MASKED,
            max_sequence_length=length,
            system_prompt=system,
        )
        prefix = (system or default_system_prompt()) + PROMPT_START
        out["prompt_lengths"] = host_lengths(comps, [prefix + caption for caption in captions], length)
        if with_negative:
            out["negative_prompt_lengths"] = host_lengths(comps, [""] * len(captions), length)
        return out


def host_lengths(comps: Components, texts: list[str], length: int) -> torch.Tensor:
    """Each text's token count as Lumina2Pipeline's mask counts it (its tokenizer, the same padding and truncation),
    as an int64 host tensor: the transformer's RoPE embedder is given these instead of reading its mask back from
    the device every step (:func:`~dit_lora.families.lumina2.model.give_host_counts`)."""
    tokens = comps.encoders["tokenizer"](texts, padding="max_length", max_length=length, truncation=True)
    return torch.tensor([sum(mask) for mask in tokens["attention_mask"]], dtype=torch.long)
