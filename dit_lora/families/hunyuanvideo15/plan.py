"""HunyuanVideo 1.5's memory plan: the kit's parts on the meta device (the transformer, the VAE, Qwen2.5-VL and ByT5),
clips of the worst bucket, every caption at the run's caption length (a batch pads to its longest: the plan takes the
longest allowed), ByT5's 256 tokens and, for image-to-video, SigLIP's tokens as the cache holds them (SigLIP itself
is released with the other encoders once the cache is built)."""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.families.hunyuanvideo15.encoders import (
    GLYPH_LEN,
    LENGTHS_KEY,
    HunyuanVideo15Encoders,
    max_sequence_length,
)
from dit_lora.families.hunyuanvideo15.info import HunyuanVideo15Task
from dit_lora.families.hunyuanvideo15.state import run_state
from dit_lora.kit.components import DiffusionPlan, encoded_plan_batches
from dit_lora.kit.video_sizes import ClipPlan

#: SigLIP's tokens of one image at the published checkpoints' 384 px (27 x 27 patches of 14 px)
SIGLIP_TOKENS = 729


class HunyuanVideo15Plan(ClipPlan, DiffusionPlan):
    """``FamilySpec.plan``: the kit's planned parts with the run's caption length; the cached conditioning of a
    batch as empty tensors."""

    task: HunyuanVideo15Task
    encoders: HunyuanVideo15Encoders

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """The kit model's parts, the run's text settings recorded."""
        comps = super().plan_components(cfg, read, depth)
        run_state(comps).text = TextSettings(max_sequence_length=max_sequence_length(cfg.data))
        return comps

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, Any]:
        """Qwen2.5-VL embeddings of the run's caption length with their counts, ByT5's with their mask, and the
        first frame's SigLIP tokens for image-to-video."""
        model: Any = comps.model
        length, dtype = max_sequence_length(cfg.data), cfg.weight_dtype
        out = {
            "prompt_embeds": torch.empty(batch_size, length, int(model.config.text_embed_dim), dtype=dtype),
            LENGTHS_KEY: torch.full((batch_size,), length),
            "prompt_embeds_2": torch.empty(batch_size, GLYPH_LEN, int(model.config.text_embed_2_dim), dtype=dtype),
            "prompt_embeds_mask_2": torch.ones(batch_size, GLYPH_LEN, dtype=torch.int64),
        }
        if self.task.task == "i2v":
            out["image_embeds"] = torch.empty(batch_size, SIGLIP_TOKENS, int(model.config.image_embed_dim))
        return out

    def plan_batches(self, cfg: TrainConfig, comps: Components) -> list[tuple[str, dict[str, Any]]]:
        """The clips' latents through the VAE (SigLIP's tokens come with the conditioning)."""
        return encoded_plan_batches(
            lambda px: {"latents": self.encoders.clip_latents(comps, px)},
            self.pixel_batches(cfg),
            lambda size: self.plan_conditioning(comps, cfg, size),
        )
