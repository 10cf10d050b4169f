"""Chroma's encoders: images through the FLUX VAE into shifted and scaled latents (the kit's ``scaled_latents``),
captions through ``ChromaPipeline``'s own ``encode_prompt``: T5's hidden states (T5 run with the caption's attention
mask, as Chroma does) padded to the run's caption length, and the transformer's caption mask, which keeps every real
token and the first padding token (lodestones' reference masking), as a boolean mask.

ChromaPipeline returns that mask in the embeddings' float dtype, and scaled-dot-product attention reads a float mask
as an additive bias, so the stock pipeline (diffusers 0.42.1) attends to every padding token with a bias of 1 instead
of masking it (huggingface/diffusers#13619, #12116). Training keeps the boolean mask Chroma was trained with, as
SimpleTuner does; the validation samples pass it to the pipeline as such."""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.contract.family import Components
from dit_lora.kit.components import DiffusionEncoders
from dit_lora.kit.prompts import CaptionLength, pipeline_prompts
from dit_lora.kit.text_conditioned import LengthCaptions

#: ``--max_sequence_length``, else ChromaPipeline's default, 512 (T5's tokens; every caption is padded to it)
max_sequence_length = CaptionLength(512)
#: what ChromaPipeline.encode_prompt returns for the captions (then the same for the negative)
KEYS = ("prompt_embeds", "text_ids", "prompt_attention_mask")


def boolean_masks(out: dict[str, Any]) -> dict[str, torch.Tensor]:
    """``encode_prompt``'s outputs without the text ids (zeros, built per step), each caption mask as booleans."""
    return {
        key: value > 0 if key.endswith("attention_mask") else value
        for key, value in out.items()
        if not key.endswith("text_ids")
    }


class ChromaEncoders(LengthCaptions, DiffusionEncoders):
    """``FamilySpec.encoders``: the latent cache's encoders (images: the kit's shifted and scaled latents) and how a
    run encodes captions (the T5 caption length its only text setting, padded to as the pipeline does)."""

    caption_length = max_sequence_length
    identity_family = "chroma"

    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """Captions through ``ChromaPipeline.encode_prompt``: ``prompt_embeds`` and the boolean
        ``prompt_attention_mask``; ``with_negative`` adds the empty caption's (Chroma samples with real CFG)."""
        length = self.recorded_length(comps)
        out = pipeline_prompts(
            comps, "ChromaPipeline", captions, with_negative=with_negative, keys=KEYS, max_sequence_length=length
        )
        return boolean_masks(out)
