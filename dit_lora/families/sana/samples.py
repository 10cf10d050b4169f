"""Sana's validation samples: from the in-memory transformer (cached prompt embeddings, the checkpoint's own sampler)
and from SanaPipeline with the saved adapter."""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionSamples, vae_on
from dit_lora.families.diffusion.sampling import square_images


def inference_scheduler(comps: Components):
    """The sampler of the checkpoint's scheduler config (DPM-Solver or flow-matching Euler), else the training one."""
    from diffusers import (  # slow: only at validation
        DPMSolverMultistepScheduler,
        FlowMatchEulerDiscreteScheduler,
    )

    config = dict((comps.state.scheduler_config if comps.state is not None else None) or {})
    if config.get("_class_name") == "DPMSolverMultistepScheduler":
        return DPMSolverMultistepScheduler.from_config(config)
    return FlowMatchEulerDiscreteScheduler.from_config(config) if config else comps.scheduler


class SanaSamples(DiffusionSamples):
    """``FamilySpec.samples``: SanaPipeline at ``--resolution``, without resolution binning."""

    def generate(self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg, seed: int) -> list:
        """Images from the in-memory transformer and the validation prompt's embeddings (VAE moved in to decode)."""
        # Diffusers' pipelines import slowly: only at validation
        from diffusers import SanaPipeline

        device = next(model.parameters()).device
        with vae_on(comps, device) as vae:
            # Any: mypy takes diffusers' top-level classes for the dummy placeholders its __init__ imports first
            pipe: Any = SanaPipeline(
                tokenizer=None, text_encoder=None, vae=vae, transformer=model, scheduler=inference_scheduler(comps)
            )
            pipe.set_progress_bar_config(disable=True)
            return square_images(
                pipe,
                cfg,
                seed,
                device,
                prompt_embeds=cond["prompt_embeds"],
                prompt_attention_mask=cond["prompt_attention_mask"],
                negative_prompt_embeds=cond["negative_prompt_embeds"],
                negative_prompt_attention_mask=cond["negative_prompt_attention_mask"],
                negative_prompt=None,
                num_images_per_prompt=cfg.validation.num_validation_images,
                guidance_scale=cfg.validation.validation_guidance_scale,
                output_type="pil",
                use_resolution_binning=False,
            )

    def generate_with_pipeline(self, pipe, prompt: str, cfg, seed: int, num_images: int, comps=None) -> list:
        """Images from the reloaded pipeline, with the instruction prefix only when the run trained with it."""
        kwargs = {} if cfg.family_options.complex_human_instruction else {"complex_human_instruction": None}
        return square_images(
            pipe,
            cfg,
            seed,
            pipe.transformer.device,
            prompt,
            num_images_per_prompt=num_images,
            guidance_scale=cfg.validation.validation_guidance_scale,
            use_resolution_binning=False,
            **kwargs,
        )
