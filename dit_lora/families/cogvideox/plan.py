"""CogVideoX's memory plan: its components from their configs on the meta device, one clip micro-batch per planned
bucket, and the cached T5 conditioning."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dit_lora.contract.family import Components
from dit_lora.families.cogvideox.model import build_components
from dit_lora.kit.components import DiffusionPlan
from dit_lora.kit.video_sizes import ClipPlan
from dit_lora.plan.fake import diffusers_on_meta, transformers_on_meta, with_depth

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


class CogVideoXPlan(ClipPlan, DiffusionPlan):
    """``FamilySpec.plan``: transformer, VAE and T5 on the meta device; clips ``(B, F, 3, H, W)`` of the run's
    buckets (:class:`~.info.CogVideoXVideo`'s); the prompt embeddings at the transformer's text length."""

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """What :meth:`CogVideoXModel.load_components <dit_lora.families.cogvideox.model.CogVideoXModel.load_components>`
        loads, built from the configs ``read`` returns (``depth``: that many transformer blocks)."""
        from diffusers import (  # heavy: only when a plan is made
            AutoencoderKLCogVideoX,
            CogVideoXTransformer3DModel,
        )
        from transformers import T5EncoderModel

        dtype = cfg.weight_dtype
        transformer = diffusers_on_meta(
            CogVideoXTransformer3DModel, with_depth(read("transformer", "config.json"), "num_layers", depth), dtype
        )
        vae = diffusers_on_meta(AutoencoderKLCogVideoX, read("vae", "config.json"), dtype)
        text_encoder = transformers_on_meta(read("text_encoder", "config.json"), dtype, T5EncoderModel)
        return build_components(
            cfg, transformer, vae, text_encoder, read("scheduler", "scheduler_config.json") or {}, None
        )

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """The prompt embeddings at the transformer's text length, as an empty tensor."""
        text = comps.encoders["text_encoder"].config.d_model
        return {"prompt_embeds": torch.empty(batch_size, comps.state.max_sequence_length, text, dtype=cfg.weight_dtype)}
