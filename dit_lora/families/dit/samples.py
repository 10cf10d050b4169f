"""DiT's validation samples: DiTPipeline around the in-memory transformer (the checkpoint's own sampler), and
DiTPipeline with the saved adapter (class names through its ``labels``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionSamples, vae_on
from dit_lora.families.diffusion.sampling import checkpoint_sampler
from dit_lora.families.dit.classes import split_class_names
from dit_lora.families.dit.state import run_state

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def inference_scheduler(comps: Components):
    """The sampler of the checkpoint's scheduler config, DDIM when it names no diffusers class."""
    return checkpoint_sampler(run_state(comps).scheduler_config, "DDIMScheduler")


class DiTSamples(DiffusionSamples):
    """``FamilySpec.samples``: the validation prompt is one class name or several, comma-separated."""

    def generate(
        self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg: TrainConfig, seed: int
    ) -> list:
        """Images of each named class from the in-memory transformer (VAE moved in to decode)."""
        # Diffusers' pipelines import slowly: only at validation
        from diffusers import DiTPipeline

        label2id = run_state(comps).label2id
        if label2id is None:  # the data stage's inspect_samples builds it, before any validation
            raise RuntimeError("DiT's validation samples need the run's label map: DiTSetup.inspect_samples builds it")
        prompt = cfg.validation.validation_prompt
        assert prompt is not None  # validation runs only with a --validation_prompt
        names = split_class_names(prompt, label2id)
        ids = [label2id[n] for n in names for _ in range(cfg.validation.num_validation_images)]
        device = next(model.parameters()).device
        with vae_on(comps, device) as vae:
            # Any: mypy takes diffusers' top-level classes for the dummy placeholders its __init__ imports first
            pipe: Any = DiTPipeline(transformer=model, vae=vae, scheduler=inference_scheduler(comps))
            pipe.set_progress_bar_config(disable=True)
            generator = torch.Generator(device=device).manual_seed(seed)
            with torch.no_grad():
                return pipe(
                    class_labels=ids,
                    guidance_scale=cfg.validation.validation_guidance_scale,
                    num_inference_steps=cfg.validation.validation_inference_steps,
                    generator=generator,
                ).images

    def generate_with_pipeline(
        self, pipe, prompt: str, cfg: TrainConfig, seed: int, num_images: int, comps=None
    ) -> list:
        """Images of each named class from the reloaded pipeline (its ``labels`` hold the trained names)."""
        names = split_class_names(prompt, pipe.labels)
        ids = [i for i in pipe.get_label_ids(names) for _ in range(num_images)]
        device = pipe.transformer.device
        generator = torch.Generator(device=device).manual_seed(seed)
        # DiTPipeline hands the VAE latents in the transformer's dtype; with a bf16 transformer and the
        # fp32 VAE, autocast reconciles them (the same autocast the in-training validation runs under).
        mixed = pipe.transformer.dtype != pipe.vae.dtype
        with torch.no_grad(), torch.autocast(device.type, dtype=pipe.transformer.dtype, enabled=mixed):
            return pipe(
                class_labels=ids,
                guidance_scale=cfg.validation.validation_guidance_scale,
                num_inference_steps=cfg.validation.validation_inference_steps,
                generator=generator,
            ).images
