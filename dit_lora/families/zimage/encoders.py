"""Z-Image's encoders: FLUX.1-VAE latents and Qwen3 caption embeddings through ZImagePipeline's own
``encode_prompt`` (chat template, second-to-last hidden state, each caption cut to its own tokens), stored padded
with their lengths so the cache and the batches keep one shape; and the run's text settings."""

from __future__ import annotations

import torch

from dit_lora.contract.family import Components
from dit_lora.kit.components import DiffusionEncoders
from dit_lora.kit.prompts import CaptionLength, pipeline_prompts
from dit_lora.kit.text_conditioned import LengthCaptions

#: ``--max_sequence_length``, else ZImagePipeline's default, 512 (the chat template's tokens count in it)
max_sequence_length = CaptionLength(512)


def padded(embeds: list[torch.Tensor], length: int) -> dict[str, torch.Tensor]:
    """The pipeline's variable-length caption embeddings as one ``prompt_embeds`` tensor ``(B, length, D)``, zero
    past each caption, and ``prompt_lengths`` ``(B,)`` int64 on the host (the loss cuts each caption back to its
    tokens from these host numbers, never reading the device)."""
    out = embeds[0].new_zeros(len(embeds), length, embeds[0].shape[-1])
    for row, embed in enumerate(embeds):
        out[row, : embed.shape[0]] = embed
    return {"prompt_embeds": out, "prompt_lengths": torch.tensor([e.shape[0] for e in embeds], dtype=torch.long)}


def unpadded(embeds: torch.Tensor, lengths: list[int]) -> list[torch.Tensor]:
    """Each caption's own tokens (views), as ``ZImagePipeline`` and the transformer take them."""
    return [embeds[row, :n] for row, n in enumerate(lengths)]


class ZImageEncoders(LengthCaptions, DiffusionEncoders):
    """``FamilySpec.encoders``: the cache's encoders (images: the kit's, as diffusers' Z-Image trainer encodes and
    ZImagePipeline undoes before decoding), and (``PromptText``) how a run encodes captions: the caption length its
    only text setting (template tokens included, as the pipeline counts them)."""

    caption_length = max_sequence_length
    identity_family = "zimage"

    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """Captions through ZImagePipeline's own ``encode_prompt`` (the empty caption as the negative), padded to
        the run's caption length with their lengths."""
        length = self.recorded_length(comps)
        # negative None: the pipeline's own, an empty caption per caption
        raw = pipeline_prompts(
            comps, "ZImagePipeline", captions, with_negative=with_negative, negative=None, max_sequence_length=length
        )
        out = padded(raw["prompt_embeds"], length)
        if with_negative:
            neg = padded(raw["negative_prompt_embeds"], length)
            out.update(negative_prompt_embeds=neg["prompt_embeds"], negative_prompt_lengths=neg["prompt_lengths"])
        return out
