"""Krea 2's validation samples: from the in-memory transformer (cached caption states and masks, the empty
negative's for the pipeline's real classifier-free guidance, the checkpoint's sampler with the pipeline's own dynamic
``mu``) and from the stock ``Krea2Pipeline`` with the saved adapter."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.krea2.encoders import max_sequence_length
from dit_lora.kit.components import DiffusionSamples
from dit_lora.kit.image_samples import SquareImageSamples
from dit_lora.kit.sampling import flow_sampler

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig, ValidationOptions

#: what a validation call takes from the cached conditioning (each repeated per image)
CONDITIONING = ("prompt_embeds", "prompt_embeds_mask", "negative_prompt_embeds", "negative_prompt_embeds_mask")


class Krea2Samples(SquareImageSamples, DiffusionSamples):
    """``FamilySpec.samples``: ``Krea2Pipeline`` at ``--resolution`` and the validation guidance scale (Krea's
    convention: ``cond + g * (cond - uncond)``)."""

    pipeline = "Krea2Pipeline"

    def sampler(self, comps: Components) -> Any:
        """The checkpoint's flow-matching sampler."""
        return flow_sampler(comps)

    def cached_kwargs(
        self, cond: dict[str, Any], device: torch.device, data: DataOptions, validation: ValidationOptions
    ) -> dict[str, Any]:
        """The cached caption states and masks, each repeated per image, and the guidance scale."""
        copies = validation.num_validation_images
        embeds = {k: cond[k].to(device).repeat_interleave(copies, 0) for k in CONDITIONING}
        return {**embeds, "guidance_scale": validation.validation_guidance_scale}

    def prompt_kwargs(self, cfg: TrainConfig, num_images: int) -> dict[str, Any]:
        """Images per prompt, the guidance scale and the trained caption length."""
        return {
            "num_images_per_prompt": num_images,
            "guidance_scale": cfg.validation.validation_guidance_scale,
            "max_sequence_length": max_sequence_length(cfg.data),
        }
