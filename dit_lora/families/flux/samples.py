"""FLUX.1's validation samples: from the in-memory transformer (cached prompt embeddings, the checkpoint's sampler
with the pipeline's own dynamic ``mu``) and from the stock ``FluxPipeline`` with the saved adapter."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.flux.encoders import max_sequence_length
from dit_lora.kit.components import DiffusionSamples
from dit_lora.kit.packed import packed_samples
from dit_lora.kit.sampling import square_images

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig


class FluxSamples(DiffusionSamples):
    """``FamilySpec.samples``: ``FluxPipeline`` at ``--resolution``, the validation guidance fed to its guidance
    embedding."""

    #: the diffusers pipeline the samples come from
    pipeline = "FluxPipeline"

    def call_kwargs(self, comps: Components | None, data: DataOptions) -> dict[str, Any]:
        """What the reloaded pipeline's call takes beside the prompt and the run's settings (Kontext: its control
        image at ``data.resolution``, the run's ``cfg.data``)."""
        return {}

    def in_memory_kwargs(self, comps: Components, model: torch.nn.Module, data: DataOptions) -> dict[str, Any]:
        """What the in-memory pipeline's call takes beside the cached embeddings (:meth:`call_kwargs` here)."""
        return self.call_kwargs(comps, data)

    def generate(
        self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg: TrainConfig, seed: int
    ) -> list:
        """Images from the in-memory transformer and the validation prompt's embeddings, each repeated per image
        (the pipeline repeats only what it encodes itself), the VAE moved in to decode."""
        return packed_samples(
            comps, model, self.pipeline, cond, cfg.data, cfg.validation, seed,
            keys=("prompt_embeds", "pooled_prompt_embeds"),
            text_parts=("text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2"),
            **self.in_memory_kwargs(comps, model, cfg.data),
        )  # fmt: skip

    def generate_with_pipeline(
        self, pipe, prompt: str, cfg: TrainConfig, seed: int, num_images: int, comps=None
    ) -> list:
        """Images from the reloaded pipeline, its captions encoded at the trained caption length."""
        kwargs = {
            "num_images_per_prompt": num_images,
            "guidance_scale": cfg.validation.validation_guidance_scale,
            "max_sequence_length": max_sequence_length(cfg.data),
            **self.call_kwargs(comps, cfg.data),
        }
        return square_images(pipe, cfg.data, cfg.validation, seed, pipe.transformer.device, prompt=prompt, **kwargs)
