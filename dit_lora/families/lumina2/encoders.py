"""Lumina 2's encoders: the FLUX.1 VAE's shifted and scaled latents (the kit's), Gemma-2 caption embeddings through
Lumina2Pipeline's own ``encode_prompt`` (the system prompt and ``" <Prompt Start> "`` before every caption, the
second-to-last hidden state, the attention mask), and the run's text settings."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.kit.components import DiffusionEncoders
from dit_lora.kit.prompts import CaptionLength, caption_length, text_pipeline
from dit_lora.kit.text_conditioned import encoder_identity

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
    from dit_lora.kit.loader import model_class  # imports diffusers: only when asked

    pipeline = model_class("diffusers", "Lumina2Pipeline")(
        transformer=None, scheduler=None, vae=None, text_encoder=None, tokenizer=None
    )
    return str(pipeline.system_prompt)


def system_prompt(cfg: TrainConfig) -> str:
    """``--system_prompt``, else the pipeline's own."""
    return cfg.family_options.system_prompt or default_system_prompt()


def recorded_system_prompt(text: TextSettings | None) -> str | None:
    """The system prompt the run's text settings record (their prefix, before ``PROMPT_START``; None before they are
    recorded: the pipeline's own)."""
    return text.prefix.removesuffix(PROMPT_START) if text and text.prefix else None


class Lumina2Encoders(DiffusionEncoders):
    """``FamilySpec.encoders``: the cache's encoders (images: the kit's, the FLUX.1 VAE's shift and scale as
    Lumina2Pipeline undoes them before decoding), and (``PromptText``) how a run encodes captions."""

    def text_settings(self, cfg: TrainConfig) -> TextSettings:
        """The run's caption length and the system prompt before every caption (which the length counts)."""
        return TextSettings(max_sequence_length=max_sequence_length(cfg.data), prefix=system_prompt(cfg) + PROMPT_START)

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """The model, its stamp, revision, variant, text dtype, caption length and system prompt (and a quantized
        encoder)."""
        return encoder_identity(
            cfg, "lumina2", max_sequence_length=max_sequence_length(cfg.data), system_prompt=system_prompt(cfg)
        )

    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """Captions (and their masks) as Lumina2Pipeline encodes them at the run's settings (:func:`encoded`), the
        empty caption as the negative; beside each its token count on the host (``prompt_lengths``)."""
        text = comps.state.text if comps.state is not None else None
        length, system = caption_length(text, max_sequence_length.default), recorded_system_prompt(text)
        embeds, mask, lengths = encoded(comps, captions, length, system)
        out = {"prompt_embeds": embeds, "prompt_attention_mask": mask, "prompt_lengths": lengths}
        if with_negative:
            negative = encoded(comps, [""] * len(captions), length, system)
            out.update(
                zip(("negative_prompt_embeds", "negative_prompt_attention_mask", "negative_prompt_lengths"), negative)
            )
        return out


def encoded(
    comps: Components, captions: list[str], length: int, system: str | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(embeds, mask, lengths)`` of ``captions`` as Lumina2Pipeline encodes them: a caption through its
    ``encode_prompt`` (the system prompt and ``PROMPT_START`` before it); the empty caption, the unconditional one
    (``--caption_dropout_probability``'s, a caption-less image's), as the pipeline encodes its negative prompt, bare
    (``_get_gemma_prompt_embeds("")``): what classifier-free guidance samples against. ``lengths``: each one's token
    count from the tokenizer on the host, the mask's sum (:func:`host_lengths`)."""
    pipe = text_pipeline(comps, "Lumina2Pipeline")
    device = comps.encoders["text_encoder"].device
    texts = [(system or default_system_prompt()) + PROMPT_START + c if c else "" for c in captions]
    with torch.no_grad():
        embeds, mask = pipe._get_gemma_prompt_embeds(texts, device=device, max_sequence_length=length)
    return embeds, mask, host_lengths(comps, texts, length)


def host_lengths(comps: Components, texts: list[str], length: int) -> torch.Tensor:
    """Each text's token count as Lumina2Pipeline's mask counts it (its tokenizer, the same padding and truncation),
    as an int64 host tensor: the transformer's RoPE embedder is given these instead of reading its mask back from
    the device every step (:func:`~dit_lora.families.lumina2.model.give_host_counts`)."""
    tokens = comps.encoders["tokenizer"](texts, padding="max_length", max_length=length, truncation=True)
    return torch.tensor([sum(mask) for mask in tokens["attention_mask"]], dtype=torch.long)
