"""FLUX.1's memory plan: its components from their configs on the meta device and the cached caption embeddings.

The transformer has two block lists (``transformer_blocks``, 19 double-stream; ``single_transformer_blocks``, 38),
planned in units of one double block with its share of single blocks (the kit's
:class:`~dit_lora.families.diffusion.loader.BlockMix`: 1 + 2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionPlan
from dit_lora.families.diffusion.loader import BlockMix, plan_parts
from dit_lora.families.flux.encoders import max_sequence_length
from dit_lora.families.flux.model import PARTS, flux_components
from dit_lora.families.flux.state import FluxRun

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: the planned units: one double block with its share of single blocks (FLUX.1 [dev]'s 19 + 38)
UNITS = BlockMix(defaults=(19, 38))


class FluxPlan(DiffusionPlan):
    """``FamilySpec.plan``: transformer, VAE, CLIP and T5 on the meta device; the caption embeddings padded to the
    run's text length at the transformer's ``joint_attention_dim``, and CLIP's pooled embedding."""

    #: each block list's length: --blocks_to_swap counts the longest
    swap_depth_keys = UNITS.swap_depth_keys

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """:func:`~dit_lora.families.flux.model.flux_components` of the kit's parts on the meta device, built from
        the configs ``read`` returns (``depth``: that many planned units)."""
        loaded = plan_parts(PARTS, cfg, read, depth, at_depth=UNITS.at_depth)
        return flux_components(loaded, FluxRun(text=max_sequence_length.settings(cfg)))

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """Caption embeddings at the run's text length and ``joint_attention_dim``, the pooled embedding at
        ``pooled_projection_dim``, as empty tensors (the text ids are built per step)."""
        model: Any = comps.model  # the FluxTransformer2DModel plan_components built
        length, dtype = comps.state.text.max_sequence_length, cfg.weight_dtype
        return {
            "prompt_embeds": torch.empty(batch_size, length, int(model.config.joint_attention_dim), dtype=dtype),
            "pooled_prompt_embeds": torch.empty(batch_size, int(model.config.pooled_projection_dim), dtype=dtype),
        }
