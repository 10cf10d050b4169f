"""The toy PixArt family's encoders (T5 captions through ``PixArtAlphaPipeline``'s own ``encode_prompt``, so training
sees what inference feeds) and its loss: epsilon prediction on DDPM, as PixArt-alpha trains."""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.contract.family import Components
from dit_lora.kit.components import (DiffusionEncoders, DiffusionLoss, ddpm_noised, model_identity,
                                                   posterior_latents)

from .model import run_state
from .options import text_length

NAME = "pixart_toy"  # the registry name, which the cache identity carries
NO_ADDED_CONDITIONS = {"resolution": None, "aspect_ratio": None}  # the 1024 px PixArt's, off for smaller models


class PixArtEncoders(DiffusionEncoders):
    """``FamilySpec.encoders``: the VAE posterior mean and T5 caption embeddings at ``--pixart_text_length``."""

    def cache_identity(self, cfg, comps: Components | None = None) -> dict[str, Any]:
        return {**model_identity(cfg, NAME), "text_dtype": cfg.training.mixed_precision, "text_length": text_length(cfg),
                "latents": "posterior_mean_fp32"}

    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> torch.Tensor:
        return posterior_latents(comps.encoders["vae"], pixel_values)

    def encode_prompts(self, comps: Components, captions: list[str], *,
                       with_negative: bool = False) -> dict[str, torch.Tensor]:
        from diffusers import PixArtAlphaPipeline

        encoder = comps.encoders["text_encoder"]
        pipe = PixArtAlphaPipeline(tokenizer=comps.encoders["tokenizer"], text_encoder=encoder, vae=None,
                                   transformer=None, scheduler=None)
        with torch.no_grad():
            embeds, mask, neg, neg_mask = pipe.encode_prompt(
                list(captions), do_classifier_free_guidance=with_negative, negative_prompt="", device=encoder.device,
                clean_caption=False, max_sequence_length=run_state(comps).text_length)
        negative = {"negative_prompt_embeds": neg, "negative_prompt_attention_mask": neg_mask} if with_negative else {}
        return {"prompt_embeds": embeds, "prompt_attention_mask": mask, **negative}


class PixArtLoss(DiffusionLoss):
    """``FamilySpec.loss``: epsilon-prediction DDPM (random draws from ``generator`` only); of a learned sigma
    (``out_channels == 2 * in_channels``) only the epsilon half, as ``PixArtAlphaPipeline`` uses only that half."""

    def compute_loss(self, comps: Components, model: torch.nn.Module, batch: dict[str, Any],
                     generator: torch.Generator, cfg) -> torch.Tensor:
        noise, timesteps, noisy = ddpm_noised(comps.scheduler, batch["latents"], generator)
        pred = model(noisy, encoder_hidden_states=batch["prompt_embeds"],
                     encoder_attention_mask=batch["prompt_attention_mask"], timestep=timesteps,
                     added_cond_kwargs=NO_ADDED_CONDITIONS, return_dict=False)[0]
        pred = run_state(comps).epsilon(pred)
        return ((pred.float() - noise.float()) ** 2).mean()
