"""DiT's memory plan: the transformer and the AutoencoderKL from their configs on the meta device, and the class
labels as the cached conditioning."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionPlan
from dit_lora.families.dit.model import dit_components
from dit_lora.plan.fake import diffusers_on_meta, with_depth

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


class DiTPlan(DiffusionPlan):
    """``FamilySpec.plan``: the transformer and the AutoencoderKL on the meta device; class ids as conditioning."""

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """What :meth:`DiTModel.load_components <dit_lora.families.dit.model.DiTModel.load_components>` loads,
        built from the configs ``read`` returns (``depth``: that many transformer blocks)."""
        # Diffusers' models and the fake-tensor tooling: only when a plan is made
        from diffusers import AutoencoderKL, DiTTransformer2DModel

        transformer = diffusers_on_meta(
            DiTTransformer2DModel, with_depth(read("transformer", "config.json"), "num_layers", depth), cfg.weight_dtype
        )
        vae = diffusers_on_meta(AutoencoderKL, read("vae", "config.json"), torch.float32)
        return dit_components(transformer, vae, read("scheduler", "scheduler_config.json") or {}, None)

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """One class id per sample."""
        return {"class_labels": torch.zeros(batch_size, dtype=torch.long)}
