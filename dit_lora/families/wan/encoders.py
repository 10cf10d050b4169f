"""Wan's encoders: clips through ``AutoencoderKLWan`` (fp32, the posterior mode normalised as the pipelines do) and
prompts through ``WanPipeline.encode_prompt`` (UMT5, 512 tokens); what changes the cache."""

from __future__ import annotations

import os
from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionEncoders
from dit_lora.families.wan.info import TEXT_LEN, WanTask
from dit_lora.families.wan.state import required, run_state
from dit_lora.modelfiles.pipeline_files import is_local, model_stamp


class WanEncoders(DiffusionEncoders):
    """``FamilySpec.encoders``: latents of the clip (image-to-video adds its conditions) and UMT5 embeddings."""

    def __init__(self, task: WanTask) -> None:
        self.task = task

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """The model and its stamp, dtype, text length and what the cached latents hold."""
        path = cfg.model.pretrained_model_name_or_path
        assert path is not None  # the parser refuses a run without one (validate_static)
        return {
            "family": self.task.name,
            "model": os.path.abspath(path) if is_local(path) else path,
            "model_stamp": model_stamp(cfg.model, ("vae", "text_encoder")),
            "revision": cfg.model.revision,
            "variant": cfg.model.variant,
            "dtype": cfg.training.mixed_precision,  # UMT5 runs in it (the VAE in fp32)
            "max_sequence_length": TEXT_LEN,
            "latents": "posterior_mode_normalised_fp32" + self.cached_conditions(cfg),
            **({"text_encoder_quantized": "nf4"} if cfg.model.quantize_text_encoder else {}),
        }

    def cached_conditions(self, cfg: TrainConfig) -> str:
        """What besides the latents the cache holds (image-to-video adds its conditions)."""
        return ""

    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        """``(B, F, 3, H, W)`` in [-1, 1] -> ``{"latents": (B, C, F', h, w)}`` (fp32, normalised posterior mode)."""
        vae = comps.encoders["vae"]
        video = pixel_values.to(vae.device, vae.dtype).permute(0, 2, 1, 3, 4)  # (B, 3, F, H, W)
        with torch.no_grad():
            latents = vae.encode(video).latent_dist.mode().float()
        state = run_state(comps)
        mean = required(state.latents_mean, "latents_mean").to(latents.device)
        std = required(state.latents_std, "latents_std").to(latents.device)
        return {"latents": (latents - mean) / std}

    def prompt_pipeline(self, comps: Components):
        """A text-only ``WanPipeline`` (prompt_clean, 512-token padding, embeddings cut to each prompt's length and
        zero-padded back): training prompts are exactly what the pipeline feeds the transformer."""
        from diffusers import WanPipeline

        return WanPipeline(
            tokenizer=comps.encoders["tokenizer"],
            text_encoder=comps.encoders["text_encoder"],
            vae=None,
            scheduler=None,
            transformer=None,
        )

    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """UMT5 embeddings as ``WanPipeline.encode_prompt`` computes them (with the empty negative on request)."""
        pipe = self.prompt_pipeline(comps)
        with torch.no_grad():
            embeds, negative = pipe.encode_prompt(
                list(captions),
                negative_prompt="",
                do_classifier_free_guidance=with_negative,
                max_sequence_length=TEXT_LEN,
                device=comps.encoders["text_encoder"].device,
            )
        out = {"prompt_embeds": embeds}
        if with_negative:
            out["negative_prompt_embeds"] = negative
        return out
