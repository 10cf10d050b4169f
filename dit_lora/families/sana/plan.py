"""Sana's memory plan: its components from their configs on the meta device and the cached text conditioning."""

from __future__ import annotations

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionPlan
from dit_lora.families.diffusion.text_conditioned import meta_components
from dit_lora.families.sana.encoders import max_sequence_length
from dit_lora.families.sana.state import SanaRun


class SanaPlan(DiffusionPlan):
    """``FamilySpec.plan``: transformer, DC-AE and Gemma-2 on the meta device; the caption embeddings padded to the
    run's text length."""

    def plan_components(self, cfg, read, depth: int | None = None) -> Components:
        """What :meth:`SanaModel.load_components <dit_lora.families.sana.model.SanaModel.load_components>` loads,
        built from the configs ``read`` returns (``depth``: that many transformer blocks)."""
        from diffusers import (  # heavy: only when a plan is made
            AutoencoderDC,
            SanaTransformer2DModel,
        )

        return meta_components(
            cfg,
            read,
            depth,
            transformer_class=SanaTransformer2DModel,
            depth_key="num_layers",
            vae_class=AutoencoderDC,
            state=SanaRun(text=TextSettings(max_sequence_length=max_sequence_length(cfg))),
        )

    def plan_conditioning(self, comps: Components, cfg, batch_size: int) -> dict[str, torch.Tensor]:
        """Caption embeddings and their mask at the run's text length, as empty tensors."""
        length, width = comps.state.text.max_sequence_length, comps.encoders["text_encoder"].config.hidden_size
        return {
            "prompt_embeds": torch.empty(batch_size, length, width, dtype=cfg.weight_dtype),
            "prompt_attention_mask": torch.ones(batch_size, length, dtype=torch.long),
        }
