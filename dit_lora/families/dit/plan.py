"""DiT's memory plan: the kit's (its model's components on the meta device), the class labels as the cached
conditioning."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dit_lora.contract.family import Components
from dit_lora.kit.components import DiffusionPlan

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


class DiTPlan(DiffusionPlan):
    """``FamilySpec.plan``: the transformer and the AutoencoderKL on the meta device; class ids as conditioning."""

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """One class id per sample."""
        return {"class_labels": torch.zeros(batch_size, dtype=torch.long)}
