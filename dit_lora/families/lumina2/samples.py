"""Lumina 2's validation samples: from the in-memory transformer (cached caption embeddings and masks, the
checkpoint's own flow-matching Euler sampler) and from Lumina2Pipeline with the saved adapter
(:class:`~dit_lora.kit.image_samples.SquareImageSamples`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.families.lumina2.encoders import max_sequence_length, system_prompt
from dit_lora.kit.components import DiffusionSamples
from dit_lora.kit.image_samples import SquareImageSamples
from dit_lora.kit.sampling import flow_sampler

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig, ValidationOptions

#: the cached conditioning Lumina2Pipeline takes as it is
EMBEDS = ("prompt_embeds", "prompt_attention_mask", "negative_prompt_embeds", "negative_prompt_attention_mask")


class Lumina2Samples(SquareImageSamples, DiffusionSamples):
    """``FamilySpec.samples``: Lumina2Pipeline at ``--resolution``, classifier-free guidance as the run asks (with
    the pipeline's own guidance normalisation)."""

    pipeline = "Lumina2Pipeline"
    sampler = staticmethod(flow_sampler)
    cast_latents_for_vae = True  # it decodes its bf16 latents as they are: the fp32 VAE gets them cast

    def cached_kwargs(
        self, cond: dict[str, Any], device: torch.device, data: DataOptions, validation: ValidationOptions
    ) -> dict[str, Any]:
        """The cached embeddings and masks (the empty caption's stand for the negative prompt), repeated once per
        image here: Lumina2Pipeline repeats given caption embeddings per image but not given negative ones."""
        copies = validation.num_validation_images
        return {
            **{key: cond[key].repeat_interleave(copies, dim=0).to(device) for key in EMBEDS},
            "guidance_scale": validation.validation_guidance_scale,
            "output_type": "pil",
        }

    def prompt_kwargs(self, cfg: TrainConfig, num_images: int) -> dict[str, Any]:
        """The image count, guidance, the caption length and the system prompt the run trained with."""
        return {
            "num_images_per_prompt": num_images,
            "guidance_scale": cfg.validation.validation_guidance_scale,
            "max_sequence_length": max_sequence_length(cfg.data),
            "system_prompt": system_prompt(cfg),
        }
