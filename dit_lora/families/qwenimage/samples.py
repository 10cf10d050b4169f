"""Qwen-Image's validation samples: from the in-memory transformer (cached prompt embeddings, the checkpoint's own
dynamically shifted sampler) and from ``QwenImagePipeline`` with the saved adapter."""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionSamples, vae_on
from dit_lora.families.diffusion.sampling import square_images
from dit_lora.families.qwenimage.encoders import NEGATIVE_PROMPT, max_sequence_length
from dit_lora.families.qwenimage.state import run_state


class QwenImageSamples(DiffusionSamples):
    """``FamilySpec.samples``: QwenImagePipeline at ``--resolution``, true classifier-free guidance at
    ``--validation_guidance_scale`` with the negative ``" "``."""

    def generate(self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg, seed: int) -> list:
        """Images from the in-memory transformer and the validation prompt's embeddings (VAE moved in to decode)."""
        from diffusers import FlowMatchEulerDiscreteScheduler, QwenImagePipeline  # slow: only at validation

        device = next(model.parameters()).device
        scheduler = FlowMatchEulerDiscreteScheduler.from_config(run_state(comps).scheduler_config)
        with vae_on(comps, device) as vae:
            # Any: mypy takes diffusers' top-level classes for the dummy placeholders its __init__ imports first
            pipe: Any = QwenImagePipeline(
                scheduler=scheduler, vae=vae, text_encoder=None, tokenizer=None, transformer=model
            )
            pipe.set_progress_bar_config(disable=True)
            return square_images(
                pipe,
                cfg,
                seed,
                device,
                prompt_embeds=cond["prompt_embeds"].to(device),
                prompt_embeds_mask=cond["prompt_embeds_mask"].to(device),
                negative_prompt_embeds=cond["negative_prompt_embeds"].to(device),
                negative_prompt_embeds_mask=cond["negative_prompt_embeds_mask"].to(device),
                true_cfg_scale=cfg.validation.validation_guidance_scale,
                num_images_per_prompt=cfg.validation.num_validation_images,
                max_sequence_length=max_sequence_length(cfg),
                output_type="pil",
            )

    def generate_with_pipeline(self, pipe, prompt: str, cfg, seed: int, num_images: int, comps=None) -> list:
        """Images from the reloaded pipeline at the same settings."""
        return square_images(
            pipe,
            cfg,
            seed,
            pipe.transformer.device,
            prompt,
            negative_prompt=NEGATIVE_PROMPT,
            true_cfg_scale=cfg.validation.validation_guidance_scale,
            num_images_per_prompt=num_images,
            max_sequence_length=max_sequence_length(cfg),
        )
