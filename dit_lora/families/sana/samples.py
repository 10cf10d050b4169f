"""Sana's validation samples: from the in-memory transformer (cached prompt embeddings, the checkpoint's own sampler)
and from SanaPipeline with the saved adapter (:class:`~dit_lora.kit.image_samples.SquareImageSamples`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.sana.encoders import max_sequence_length
from dit_lora.kit.components import DiffusionSamples
from dit_lora.kit.image_samples import SquareImageSamples

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig, ValidationOptions


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


class SanaSamples(SquareImageSamples, DiffusionSamples):
    """``FamilySpec.samples``: SanaPipeline at ``--resolution``, without resolution binning."""

    pipeline = "SanaPipeline"
    sampler = staticmethod(inference_scheduler)

    def cached_kwargs(
        self, cond: dict[str, Any], device: torch.device, data: DataOptions, validation: ValidationOptions
    ) -> dict[str, Any]:
        """The cached embeddings and masks (the empty caption's stand for the negative prompt), unbinned."""
        embeds = ("prompt_embeds", "prompt_attention_mask", "negative_prompt_embeds", "negative_prompt_attention_mask")
        return {
            **{key: cond[key] for key in embeds},
            "negative_prompt": None,
            "num_images_per_prompt": validation.num_validation_images,
            "guidance_scale": validation.validation_guidance_scale,
            "output_type": "pil",
            "use_resolution_binning": False,
        }

    def prompt_kwargs(self, cfg: TrainConfig, num_images: int) -> dict[str, Any]:
        """Unbinned, at the run's caption length, with the instruction prefix only when the run trained with it."""
        chi = {} if cfg.family_options.complex_human_instruction else {"complex_human_instruction": None}
        guidance = cfg.validation.validation_guidance_scale
        return {
            "num_images_per_prompt": num_images,
            "guidance_scale": guidance,
            "use_resolution_binning": False,
            "max_sequence_length": max_sequence_length(cfg.data),
            **chi,
        }
