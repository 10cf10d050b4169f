"""The toy PixArt family's validation samples: from the in-memory transformer (cached prompt embeddings, the
checkpoint's own sampler) and from ``PixArtAlphaPipeline`` with the saved adapter."""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionSamples, vae_on

from .options import text_length


def inference_scheduler(comps: Components):
    """The sampler the checkpoint's scheduler config names (DPM-Solver when it names none)."""
    import diffusers

    config = dict((comps.state.scheduler_config if comps.state is not None else None) or {})
    cls = getattr(diffusers, str(config.get("_class_name", "")), None) or diffusers.DPMSolverMultistepScheduler
    return cls.from_config(config)


class PixArtSamples(DiffusionSamples):
    """``FamilySpec.samples``: ``PixArtAlphaPipeline`` at ``--resolution``, without resolution binning."""

    def generate(self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg, seed: int) -> list:
        """Validation images from the in-memory transformer and the cached prompt embeddings."""
        from diffusers import PixArtAlphaPipeline

        device = next(model.parameters()).device
        with vae_on(comps, device) as vae:
            pipe = PixArtAlphaPipeline(tokenizer=None, text_encoder=None, vae=vae, transformer=model,
                                       scheduler=inference_scheduler(comps))
            pipe.set_progress_bar_config(disable=True)
            generator = torch.Generator(device=device).manual_seed(seed)
            with torch.no_grad():
                return pipe(negative_prompt=None, num_images_per_prompt=cfg.validation.num_validation_images,
                            height=cfg.data.resolution, width=cfg.data.resolution, use_resolution_binning=False,
                            num_inference_steps=cfg.validation.validation_inference_steps,
                            guidance_scale=cfg.validation.validation_guidance_scale, generator=generator, **cond).images

    def generate_with_pipeline(self, pipe, prompt: str, cfg, seed: int, num_images: int, comps=None) -> list:
        """Images from the reloaded pipeline (the final validation)."""
        device = pipe.transformer.device
        generator = torch.Generator(device=device).manual_seed(seed)
        # The pipeline hands the fp32 VAE latents in the transformer's dtype: autocast reconciles them (the
        # autocast the in-training validation runs under).
        mixed = pipe.transformer.dtype != pipe.vae.dtype
        with torch.no_grad(), torch.autocast(device.type, dtype=pipe.transformer.dtype, enabled=mixed):
            return pipe(prompt, num_images_per_prompt=num_images, height=cfg.data.resolution, width=cfg.data.resolution,
                        num_inference_steps=cfg.validation.validation_inference_steps, use_resolution_binning=False,
                        guidance_scale=cfg.validation.validation_guidance_scale, generator=generator, clean_caption=False,
                        max_sequence_length=text_length(cfg)).images
