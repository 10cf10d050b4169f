"""Z-Image's validation samples: from the in-memory transformer (cached caption embeddings, the checkpoint's own
flow-matching Euler sampler) and from ZImagePipeline with the saved adapter
(:class:`~dit_lora.kit.image_samples.SquareImageSamples`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.families.zimage.encoders import max_sequence_length, unpadded
from dit_lora.kit.components import DiffusionSamples
from dit_lora.kit.image_samples import SquareImageSamples
from dit_lora.kit.sampling import flow_sampler

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig, ValidationOptions


def embeddings(cond: dict[str, Any], key: str, copies: int) -> list[torch.Tensor]:
    """The cached ``key`` embeddings as the pipeline's list of per-caption tensors, each repeated ``copies``
    times (the pipeline repeats a given list itself only when it encodes)."""
    lengths = [int(n) for n in cond[key.replace("embeds", "lengths")].tolist()]
    return [e for e in unpadded(cond[key], lengths) for _ in range(copies)]


class ZImageSamples(SquareImageSamples, DiffusionSamples):
    """``FamilySpec.samples``: ZImagePipeline at ``--resolution``, classifier-free guidance as the run asks."""

    pipeline = "ZImagePipeline"
    sampler = staticmethod(flow_sampler)

    def cached_kwargs(
        self, cond: dict[str, Any], device: torch.device, data: DataOptions, validation: ValidationOptions
    ) -> dict[str, Any]:
        """The cached caption embeddings as per-image lists, guidance and the caption length."""
        copies = validation.num_validation_images
        return {
            "prompt_embeds": [e.to(device) for e in embeddings(cond, "prompt_embeds", copies)],
            "negative_prompt_embeds": [e.to(device) for e in embeddings(cond, "negative_prompt_embeds", copies)],
            "guidance_scale": validation.validation_guidance_scale,
            "output_type": "pil",
            "max_sequence_length": max_sequence_length(data),
        }

    def prompt_kwargs(self, cfg: TrainConfig, num_images: int) -> dict[str, Any]:
        """The image count, guidance and the caption length."""
        guidance = cfg.validation.validation_guidance_scale
        return {
            "num_images_per_prompt": num_images,
            "guidance_scale": guidance,
            "max_sequence_length": max_sequence_length(cfg.data),
        }
