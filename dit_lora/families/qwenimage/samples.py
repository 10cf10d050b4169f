"""Qwen-Image's validation samples: from the in-memory transformer (cached prompt embeddings, the checkpoint's own
dynamically shifted sampler) and from ``QwenImagePipeline`` with the saved adapter
(:class:`~dit_lora.kit.image_samples.SquareImageSamples`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.qwenimage.encoders import NEGATIVE_PROMPT, max_sequence_length
from dit_lora.families.qwenimage.state import run_state
from dit_lora.kit.components import DiffusionSamples
from dit_lora.kit.image_samples import SquareImageSamples

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig, ValidationOptions


class QwenImageSamples(SquareImageSamples, DiffusionSamples):
    """``FamilySpec.samples``: QwenImagePipeline at ``--resolution``, true classifier-free guidance at
    ``--validation_guidance_scale`` with the negative ``" "``."""

    pipeline = "QwenImagePipeline"

    def sampler(self, comps: Components) -> Any:
        """The checkpoint's flow-matching Euler sampler."""
        from diffusers import FlowMatchEulerDiscreteScheduler  # slow: only at validation

        return FlowMatchEulerDiscreteScheduler.from_config(run_state(comps).scheduler_config)

    def cached_kwargs(
        self, cond: dict[str, Any], device: torch.device, data: DataOptions, validation: ValidationOptions
    ) -> dict[str, Any]:
        """The cached embeddings and masks (the negative's too: no negative prompt), true guidance, the image count
        and the caption length."""
        embeds = ("prompt_embeds", "prompt_embeds_mask", "negative_prompt_embeds", "negative_prompt_embeds_mask")
        return {
            **{key: cond[key].to(device) for key in embeds},
            "true_cfg_scale": validation.validation_guidance_scale,
            "num_images_per_prompt": validation.num_validation_images,
            "max_sequence_length": max_sequence_length(data),
            "output_type": "pil",
        }

    def prompt_kwargs(self, cfg: TrainConfig, num_images: int) -> dict[str, Any]:
        """The negative ``" "``, true guidance, the image count and the caption length."""
        return {
            "negative_prompt": NEGATIVE_PROMPT,
            "true_cfg_scale": cfg.validation.validation_guidance_scale,
            "num_images_per_prompt": num_images,
            "max_sequence_length": max_sequence_length(cfg.data),
        }
