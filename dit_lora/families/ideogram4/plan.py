"""Ideogram 4's memory plan: its components from their configs on the meta device (the unconditional transformer is
not among them: it waits in host memory, on the device only while samples are drawn) and the captions' features at
the run's caption length, the longest a batch can hold."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.ideogram4.encoders import LENGTHS_KEY, max_sequence_length
from dit_lora.kit.components import DiffusionPlan

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


class Ideogram4Plan(DiffusionPlan):
    """``FamilySpec.plan``: transformer, VAE and Qwen3-VL on the meta device; every caption ``--max_sequence_length``
    tokens of ``llm_features_dim`` features (a batch is padded to its longest caption: the plan takes the longest
    allowed)."""

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, Any]:
        """The captions' features and their token counts, as empty tensors."""
        model: Any = comps.model  # the Ideogram4Transformer2DModel plan_components built
        length = max_sequence_length(cfg.data)
        return {
            "prompt_embeds": torch.empty(
                batch_size, length, int(model.config.llm_features_dim), dtype=cfg.weight_dtype
            ),
            LENGTHS_KEY: torch.full((batch_size,), length),
            "caption_lengths": [length] * batch_size,
        }
