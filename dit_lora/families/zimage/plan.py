"""Z-Image's memory plan: its components from their configs on the meta device and the cached caption
embeddings at the run's full caption length (the longest a batch can hold)."""

from __future__ import annotations

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionPlan
from dit_lora.families.diffusion.text_conditioned import meta_components
from dit_lora.families.zimage.encoders import max_sequence_length
from dit_lora.families.zimage.state import ZImageRun


class ZImagePlan(DiffusionPlan):
    """``FamilySpec.plan``: transformer, FLUX.1 VAE and Qwen3 on the meta device; the main ``layers`` are the
    blocks the planner counts (the two refiner stacks run once each, at every depth)."""

    depth_key = ("transformer/config.json", "n_layers")

    def plan_components(self, cfg, read, depth: int | None = None) -> Components:
        """What :meth:`ZImageModel.load_components <dit_lora.families.zimage.model.ZImageModel.load_components>`
        loads, built from the configs ``read`` returns (``depth``: that many main layers)."""
        from diffusers import AutoencoderKL, ZImageTransformer2DModel  # heavy: only when a plan is made

        return meta_components(
            cfg,
            read,
            depth,
            transformer_class=ZImageTransformer2DModel,
            depth_key="n_layers",
            vae_class=AutoencoderKL,
            state=ZImageRun(text=TextSettings(max_sequence_length=max_sequence_length(cfg))),
        )

    def plan_conditioning(self, comps: Components, cfg, batch_size: int) -> dict[str, torch.Tensor]:
        """Caption embeddings at the run's full caption length (no ``caption_lengths``: every caption is full)."""
        length, width = comps.state.text.max_sequence_length, comps.encoders["text_encoder"].config.hidden_size
        return {"prompt_embeds": torch.empty(batch_size, length, width, dtype=cfg.weight_dtype)}
