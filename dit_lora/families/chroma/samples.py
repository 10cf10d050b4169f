"""Chroma's validation samples: from the in-memory transformer (cached prompt embeddings and their boolean masks, the
empty negative's for the pipeline's real classifier-free guidance, the checkpoint's sampler with the pipeline's own
dynamic ``mu``) and from the stock ``ChromaPipeline`` with the saved adapter, its prompt encoded first and its masks
passed as booleans (as the model card's snippet does: the pipeline's own float masks do not mask)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.chroma.encoders import max_sequence_length
from dit_lora.kit.components import DiffusionSamples
from dit_lora.kit.packed import packed_samples
from dit_lora.kit.sampling import square_images

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: what a validation call takes from the cached conditioning (each repeated per image)
CONDITIONING = ("prompt_embeds", "prompt_attention_mask", "negative_prompt_embeds", "negative_prompt_attention_mask")


class ChromaSamples(DiffusionSamples):
    """``FamilySpec.samples``: ``ChromaPipeline`` at ``--resolution`` and the validation guidance scale (real CFG
    against the empty caption)."""

    def generate(
        self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg: TrainConfig, seed: int
    ) -> list:
        """Images from the in-memory transformer and the validation prompt's embeddings and masks, each repeated per
        image (the pipeline repeats only what it encodes itself), the VAE moved in to decode."""
        return packed_samples(comps, model, "ChromaPipeline", cond, cfg.data, cfg.validation, seed, keys=CONDITIONING)

    def generate_with_pipeline(
        self, pipe, prompt: str, cfg: TrainConfig, seed: int, num_images: int, comps=None
    ) -> list:
        """Images from the reloaded pipeline as the model card samples: the prompt and the empty negative through its
        own ``encode_prompt`` at the trained caption length, their masks passed as booleans (as trained)."""
        with torch.no_grad():
            embeds, _, mask, negative, _, negative_mask = pipe.encode_prompt(
                prompt,
                negative_prompt="",
                device=pipe.transformer.device,
                num_images_per_prompt=num_images,
                max_sequence_length=max_sequence_length(cfg.data),
            )
        kwargs = {
            "prompt_embeds": embeds,
            "prompt_attention_mask": mask > 0,
            "negative_prompt_embeds": negative,
            "negative_prompt_attention_mask": negative_mask > 0,
            "guidance_scale": cfg.validation.validation_guidance_scale,
        }
        return square_images(pipe, cfg.data, cfg.validation, seed, pipe.transformer.device, **kwargs)
