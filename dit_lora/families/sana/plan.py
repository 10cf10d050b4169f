"""Sana's memory plan: its components from their configs on the meta device and the cached text conditioning."""

from __future__ import annotations

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionPlan
from dit_lora.families.sana.encoders import max_sequence_length
from dit_lora.families.sana.state import SanaRun
from dit_lora.modeling.flow_matching import training_scheduler
from dit_lora.plan.fake import diffusers_on_meta, transformers_on_meta, with_depth


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

        dtype = cfg.weight_dtype
        transformer = diffusers_on_meta(
            SanaTransformer2DModel, with_depth(read("transformer", "config.json"), "num_layers", depth), dtype
        )
        vae = diffusers_on_meta(AutoencoderDC, read("vae", "config.json"), torch.float32)
        text_encoder = transformers_on_meta(read("text_encoder", "config.json"), dtype)
        scheduler = training_scheduler(read("scheduler", "scheduler_config.json") or {})
        return Components(
            model=transformer,
            scheduler=scheduler,
            encoders={"vae": vae, "text_encoder": text_encoder},
            state=SanaRun(text=TextSettings(max_sequence_length=max_sequence_length(cfg))),
        )

    def plan_conditioning(self, comps: Components, cfg, batch_size: int) -> dict[str, torch.Tensor]:
        """Caption embeddings and their mask at the run's text length, as empty tensors."""
        length, width = comps.state.text.max_sequence_length, comps.encoders["text_encoder"].config.hidden_size
        return {
            "prompt_embeds": torch.empty(batch_size, length, width, dtype=cfg.weight_dtype),
            "prompt_attention_mask": torch.ones(batch_size, length, dtype=torch.long),
        }
