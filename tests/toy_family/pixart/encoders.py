"""The toy PixArt family's encoders: AutoencoderKL latents and T5 caption embeddings through
``PixArtAlphaPipeline``'s own ``encode_prompt`` (so training sees what inference feeds), cached together."""

from __future__ import annotations

import os
from typing import Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionEncoders
from dit_lora.modelfiles.pipeline_files import is_local, model_stamp

from .options import text_length
from .state import run_state

#: the registry name, which the cache identity carries
NAME = "pixart_toy"


class PixArtEncoders(DiffusionEncoders):
    """``FamilySpec.encoders``: the VAE posterior mean and T5 caption embeddings at ``--pixart_text_length``."""

    def cache_identity(self, cfg, comps: Components | None = None) -> dict[str, Any]:
        """The model, its files' stamp and the caption length: what changes the cached latents and embeddings."""
        path = cfg.model.pretrained_model_name_or_path
        return {"family": NAME, "model": os.path.abspath(path) if is_local(path) else path,
                "model_stamp": model_stamp(cfg.model, ("vae", "text_encoder")), "revision": cfg.model.revision,
                "variant": cfg.model.variant, "text_dtype": cfg.training.mixed_precision, "text_length": text_length(cfg),
                "latents": "posterior_mean_fp32"}

    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> torch.Tensor:
        """Pixels in [-1, 1] -> the VAE posterior mean times ``scaling_factor``, fp32 (deterministic)."""
        vae = comps.encoders["vae"]
        with torch.no_grad():
            latents = vae.encode(pixel_values.to(vae.device, torch.float32)).latent_dist.mode()
        return (latents * vae.config.scaling_factor).float()

    def encode_prompts(self, comps: Components, captions: list[str], *,
                       with_negative: bool = False) -> dict[str, torch.Tensor]:
        """Captions -> T5 embeddings and mask through ``PixArtAlphaPipeline.encode_prompt`` (+ the "" negative)."""
        from diffusers import PixArtAlphaPipeline

        encoder = comps.encoders["text_encoder"]
        pipe = PixArtAlphaPipeline(tokenizer=comps.encoders["tokenizer"], text_encoder=encoder, vae=None,
                                   transformer=None, scheduler=None)
        with torch.no_grad():
            embeds, mask, neg, neg_mask = pipe.encode_prompt(
                list(captions), do_classifier_free_guidance=with_negative, negative_prompt="", device=encoder.device,
                clean_caption=False, max_sequence_length=run_state(comps).text_length)
        out = {"prompt_embeds": embeds, "prompt_attention_mask": mask}
        if with_negative:
            out.update(negative_prompt_embeds=neg, negative_prompt_attention_mask=neg_mask)
        return out
