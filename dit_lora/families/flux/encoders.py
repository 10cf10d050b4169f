"""FLUX.1's encoders: images through the FLUX VAE into shifted and scaled latents (the kit's ``scaled_latents``),
captions through ``FluxPipeline``'s own ``encode_prompt``: T5's hidden states padded to the run's caption length and
CLIP's pooled output, exactly as the pipeline computes them."""

from __future__ import annotations

import torch

from dit_lora.contract.family import Components
from dit_lora.kit.components import DiffusionEncoders
from dit_lora.kit.prompts import CaptionLength, text_pipeline
from dit_lora.kit.text_conditioned import LengthCaptions

#: ``--max_sequence_length``, else FluxPipeline's default, 512 (T5's tokens; every caption is padded to it)
max_sequence_length = CaptionLength(512)


class FluxEncoders(LengthCaptions, DiffusionEncoders):
    """``FamilySpec.encoders``: the latent cache's encoders (images: the kit's shifted and scaled latents) and how a
    run encodes captions (the T5 caption length its only text setting, padded to as the pipeline does)."""

    caption_length = max_sequence_length
    identity_family = "flux"

    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """Captions through ``FluxPipeline.encode_prompt``: ``prompt_embeds`` (T5) and ``pooled_prompt_embeds``
        (CLIP); ``with_negative`` adds the empty caption's (for a run sampling with ``true_cfg_scale``)."""
        pipe = text_pipeline(comps, "FluxPipeline", also=("tokenizer_2", "text_encoder_2"))
        kwargs = {"device": comps.encoders["text_encoder_2"].device, "max_sequence_length": self.recorded_length(comps)}
        with torch.no_grad():
            embeds, pooled, _ = pipe.encode_prompt(prompt=list(captions), prompt_2=None, **kwargs)
            out = {"prompt_embeds": embeds, "pooled_prompt_embeds": pooled}
            if with_negative:
                neg, neg_pooled, _ = pipe.encode_prompt(prompt=[""] * len(captions), prompt_2=None, **kwargs)
                out.update(negative_prompt_embeds=neg, negative_pooled_prompt_embeds=neg_pooled)
        return out
