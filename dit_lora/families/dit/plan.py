"""DiT's memory plan: the kit's parts (:data:`~dit_lora.families.dit.model.PARTS`) on the meta device, and the class
labels as the cached conditioning."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionPlan
from dit_lora.families.diffusion.loader import plan_parts
from dit_lora.families.dit.model import PARTS, dit_components

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


class DiTPlan(DiffusionPlan):
    """``FamilySpec.plan``: the transformer and the AutoencoderKL on the meta device; class ids as conditioning."""

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """What :meth:`DiTModel.load_components <dit_lora.families.dit.model.DiTModel.load_components>` loads,
        built from the configs ``read`` returns (``depth``: that many transformer blocks)."""
        loaded = plan_parts(PARTS, cfg, read, depth)
        return dit_components(loaded.transformer, loaded.vae, loaded.scheduler_config, None)

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """One class id per sample."""
        return {"class_labels": torch.zeros(batch_size, dtype=torch.long)}
