"""FLUX.2's memory plan: its components from their configs on the meta device and the cached caption embeddings.

The transformer has two block lists (``transformer_blocks``, ``single_transformer_blocks``), planned in units of one
double block with its share of single blocks (the kit's :class:`~dit_lora.kit.loader.BlockMix`; dev:
1 + 6, klein 4B: 5 + 20, 1 + 4; klein 9B: 8 + 24, 1 + 3).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from dit_lora.contract.family import Components
from dit_lora.families.flux2.encoders import max_sequence_length
from dit_lora.families.flux2.model import PARTS, PIPELINES, flux2_components, index_text_encoder
from dit_lora.kit.components import DiffusionPlan
from dit_lora.kit.guided_flow import GuidedFlowPlan
from dit_lora.kit.loader import BlockMix, TextEncoder, index_pipeline, plan_parts

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


class Flux2Plan(GuidedFlowPlan, DiffusionPlan):
    """``FamilySpec.plan``: transformer, VAE and text encoder on the meta device (the folder's text encoder class);
    the kit's caption embeddings padded to the run's text length at the transformer's ``joint_attention_dim``."""

    #: the planned units: one double block with its share of single blocks (FLUX.2 [dev]'s 8 + 48 where a config has
    #: none)
    units = BlockMix(defaults=(8, 48))

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """:func:`~dit_lora.families.flux2.model.flux2_components` of the kit's parts on the meta device, built from
        the configs ``read`` returns (``depth``: that many planned units; the folder's text encoder class)."""
        index = read("", "model_index.json") or {}
        parts = replace(PARTS, text_encoders=(TextEncoder(index_text_encoder(index)),))
        loaded = plan_parts(parts, cfg, read, depth, at_depth=self.units.at_depth)
        return flux2_components(index_pipeline(index, PIPELINES), loaded, max_sequence_length.settings(cfg.data))
