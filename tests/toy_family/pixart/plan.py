"""The toy PixArt family's memory plan: its components from their configs on the meta device and the cached T5
conditioning."""

from __future__ import annotations

import torch

from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionPlan

from .model import pixart_components


class PixArtPlan(DiffusionPlan):
    """``FamilySpec.plan``: transformer, AutoencoderKL and T5 on the meta device; the caption embeddings padded to
    ``--pixart_text_length``."""

    def plan_components(self, cfg, read, depth: int | None = None) -> Components:
        """What :meth:`PixArtModel.load_components <.model.PixArtModel.load_components>` loads, built on the meta
        device from the configs ``read`` returns (``depth``: that many transformer blocks)."""
        from diffusers import AutoencoderKL, PixArtTransformer2DModel
        from transformers import T5EncoderModel

        from dit_lora.plan.fake import (
            diffusers_on_meta,
            transformers_on_meta,
            with_depth,
        )

        transformer = diffusers_on_meta(PixArtTransformer2DModel, with_depth(read("transformer", "config.json"),
                                                                             "num_layers", depth), cfg.weight_dtype)
        vae = diffusers_on_meta(AutoencoderKL, read("vae", "config.json"), torch.float32)
        text_encoder = transformers_on_meta(read("text_encoder", "config.json"), cfg.weight_dtype, T5EncoderModel)
        return pixart_components(cfg, (transformer, vae, text_encoder, None),
                                 read("scheduler", "scheduler_config.json") or {}, None)

    def plan_conditioning(self, comps: Components, cfg, batch_size: int) -> dict[str, torch.Tensor]:
        """The cached caption embeddings and mask of ``batch_size`` samples, as empty tensors."""
        length, width = comps.state.text_length, comps.encoders["text_encoder"].config.d_model
        return {"prompt_embeds": torch.empty(batch_size, length, width, dtype=cfg.weight_dtype),
                "prompt_attention_mask": torch.ones(batch_size, length, dtype=torch.long)}
