"""Chroma's memory plan: the kit's guided flow plan
(:class:`~dit_lora.kit.guided_flow.GuidedFlowPlan`: its components from their configs on the meta
device, the cached caption embeddings) with the captions' mask.

The transformer has two block lists (``transformer_blocks``, 19 double-stream; ``single_transformer_blocks``, 38),
planned in units of one double block with its share of single blocks (the kit's
:class:`~dit_lora.kit.loader.BlockMix`: 1 + 2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dit_lora.contract.family import Components
from dit_lora.kit.components import DiffusionPlan
from dit_lora.kit.guided_flow import GuidedFlowPlan
from dit_lora.kit.loader import BlockMix

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


class ChromaPlan(GuidedFlowPlan, DiffusionPlan):
    """``FamilySpec.plan``: transformer, VAE and T5 on the meta device; the caption embeddings padded to the run's
    text length at the transformer's ``joint_attention_dim``, with their mask."""

    #: the planned units: one double block with its share of single blocks (Chroma1-HD's 19 + 38)
    units = BlockMix(defaults=(19, 38))

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """The kit's caption embeddings and their boolean mask, as empty tensors."""
        mask = torch.ones(batch_size, comps.state.text.max_sequence_length, dtype=torch.bool)
        return {**super().plan_conditioning(comps, cfg, batch_size), "prompt_attention_mask": mask}
