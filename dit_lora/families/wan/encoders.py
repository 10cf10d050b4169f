"""Wan's encoders: clips through ``AutoencoderKLWan`` (fp32, the posterior mode normalised as the pipelines do) and
prompts through ``WanPipeline.encode_prompt`` (UMT5, 512 tokens); what changes the cache."""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.wan.info import TEXT_LEN, WanTask
from dit_lora.families.wan.state import required, run_state
from dit_lora.kit.components import DiffusionEncoders
from dit_lora.kit.latents import model_identity, normalised_clip_latents
from dit_lora.kit.prompts import pipeline_prompts


class WanEncoders(DiffusionEncoders):
    """``FamilySpec.encoders``: latents of the clip (image-to-video adds its conditions) and UMT5 embeddings."""

    def __init__(self, task: WanTask) -> None:
        self.task = task

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """The model and its stamp, dtype, text length and what the cached latents hold."""
        return {
            "family": self.task.name,
            **model_identity(cfg),
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
        state = run_state(comps)
        mean, std = required(state.latents_mean, "latents_mean"), required(state.latents_std, "latents_std")
        return normalised_clip_latents(comps.encoders["vae"], pixel_values, mean, std)

    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """UMT5 embeddings as ``WanPipeline.encode_prompt`` computes them (prompt_clean, 512-token padding, embeddings
        cut to each prompt's length and zero-padded back), with the empty negative on request."""
        return pipeline_prompts(
            comps, "WanPipeline", captions, with_negative=with_negative, max_sequence_length=TEXT_LEN
        )
