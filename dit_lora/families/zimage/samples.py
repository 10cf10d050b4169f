"""Z-Image's validation samples: from the in-memory transformer (cached caption embeddings, the checkpoint's own
flow-matching Euler sampler) and from ZImagePipeline with the saved adapter."""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionSamples, vae_on
from dit_lora.families.diffusion.sampling import square_images
from dit_lora.families.zimage.encoders import max_sequence_length, unpadded


def inference_scheduler(comps: Components):
    """The checkpoint's own FlowMatchEulerDiscreteScheduler (its full config), else the training one."""
    from diffusers import FlowMatchEulerDiscreteScheduler  # slow: only at validation

    config = dict((comps.state.scheduler_config if comps.state is not None else None) or {})
    return FlowMatchEulerDiscreteScheduler.from_config(config) if config else comps.scheduler


def embeddings(cond: dict[str, Any], key: str, copies: int) -> list[torch.Tensor]:
    """The cached ``key`` embeddings as the pipeline's list of per-caption tensors, each repeated ``copies``
    times (the pipeline repeats a given list itself only when it encodes)."""
    lengths = [int(n) for n in cond[key.replace("embeds", "lengths")].tolist()]
    return [e for e in unpadded(cond[key], lengths) for _ in range(copies)]


class ZImageSamples(DiffusionSamples):
    """``FamilySpec.samples``: ZImagePipeline at ``--resolution``, classifier-free guidance as the run asks."""

    def generate(self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg, seed: int) -> list:
        """Images from the in-memory transformer and the validation prompt's embeddings (VAE moved in to decode)."""
        from diffusers import ZImagePipeline  # slow: only at validation

        device = next(model.parameters()).device
        with vae_on(comps, device) as vae:
            # Any: mypy takes diffusers' top-level classes for the dummy placeholders its __init__ imports first
            pipe: Any = ZImagePipeline(
                scheduler=inference_scheduler(comps), vae=vae, text_encoder=None, tokenizer=None, transformer=model
            )
            pipe.set_progress_bar_config(disable=True)
            copies = cfg.validation.num_validation_images
            return square_images(
                pipe,
                cfg,
                seed,
                device,
                prompt_embeds=[e.to(device) for e in embeddings(cond, "prompt_embeds", copies)],
                negative_prompt_embeds=[e.to(device) for e in embeddings(cond, "negative_prompt_embeds", copies)],
                guidance_scale=cfg.validation.validation_guidance_scale,
                output_type="pil",
                max_sequence_length=max_sequence_length(cfg),
            )

    def generate_with_pipeline(self, pipe, prompt: str, cfg, seed: int, num_images: int, comps=None) -> list:
        """Images from the reloaded pipeline at the run's validation settings."""
        return square_images(
            pipe,
            cfg,
            seed,
            pipe.transformer.device,
            prompt,
            num_images_per_prompt=num_images,
            guidance_scale=cfg.validation.validation_guidance_scale,
            max_sequence_length=max_sequence_length(cfg),
        )
