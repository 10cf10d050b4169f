"""Chroma's memory plan: its components from their configs on the meta device and the cached caption embeddings.

The transformer has two block lists (``transformer_blocks``, 19 double-stream; ``single_transformer_blocks``, 38),
planned in units of one double block with its share of single blocks (the kit's
:class:`~dit_lora.families.diffusion.loader.BlockMix`: 1 + 2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.chroma.encoders import max_sequence_length
from dit_lora.families.chroma.model import PARTS, chroma_components
from dit_lora.families.chroma.state import ChromaRun
from dit_lora.families.diffusion.components import DiffusionPlan
from dit_lora.families.diffusion.loader import BlockMix, plan_parts

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: the planned units: one double block with its share of single blocks (Chroma1-HD's 19 + 38)
UNITS = BlockMix(defaults=(19, 38))


class ChromaPlan(DiffusionPlan):
    """``FamilySpec.plan``: transformer, VAE and T5 on the meta device; the caption embeddings padded to the run's
    text length at the transformer's ``joint_attention_dim``, with their mask."""

    #: each block list's length: --blocks_to_swap counts the longest
    swap_depth_keys = UNITS.swap_depth_keys

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """:func:`~dit_lora.families.chroma.model.chroma_components` of the kit's parts on the meta device, built
        from the configs ``read`` returns (``depth``: that many planned units)."""
        loaded = plan_parts(PARTS, cfg, read, depth, at_depth=UNITS.at_depth)
        return chroma_components(loaded, ChromaRun(text=max_sequence_length.settings(cfg)))

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """Caption embeddings at the run's text length and ``joint_attention_dim`` and their boolean mask, as empty
        tensors (the text ids are built per step)."""
        model: Any = comps.model  # the ChromaTransformer2DModel plan_components built
        length, dtype = comps.state.text.max_sequence_length, cfg.weight_dtype
        return {
            "prompt_embeds": torch.empty(batch_size, length, int(model.config.joint_attention_dim), dtype=dtype),
            "prompt_attention_mask": torch.ones(batch_size, length, dtype=torch.bool),
        }
