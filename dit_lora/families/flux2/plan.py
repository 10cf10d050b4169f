"""FLUX.2's memory plan: its components from their configs on the meta device and the cached caption embeddings.

The transformer has two block lists (``transformer_blocks``, ``single_transformer_blocks``); the planner traces two
and three "blocks" and extrapolates to the depth its ``depth_key`` reads, so one planned unit is one double block
with its share of single blocks (dev: 8 double, 48 single, so 1 + 6; klein 4B: 5 + 20, 1 + 4; klein 9B: 8 + 24,
1 + 3) and the extrapolation adds whole units of the real model's mix.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionPlan
from dit_lora.families.diffusion.loader import TextEncoder, index_pipeline, plan_parts
from dit_lora.families.flux2.encoders import max_sequence_length
from dit_lora.families.flux2.model import PARTS, PIPELINES, flux2_components, index_text_encoder

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def with_units(config: dict, units: int | None) -> dict:
    """The transformer config cut to ``units`` planned units (None: unchanged): ``units`` double blocks and
    ``units`` times the real model's single blocks per double block."""
    out = dict(config)
    if units is None:
        return out
    doubles, singles = int(config.get("num_layers", 8)), int(config.get("num_single_layers", 48))
    out["num_layers"] = units
    out["num_single_layers"] = units * math.ceil(singles / max(doubles, 1))
    return out


class Flux2Plan(DiffusionPlan):
    """``FamilySpec.plan``: transformer, VAE and text encoder on the meta device; the caption embeddings padded to
    the run's text length at the transformer's ``joint_attention_dim``."""

    #: each block list's length: --blocks_to_swap counts the longest (block_swap.per_list_counts)
    swap_depth_keys: tuple[tuple[str, str], ...] = (
        ("transformer/config.json", "num_layers"),
        ("transformer/config.json", "num_single_layers"),
    )

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """:func:`~dit_lora.families.flux2.model.flux2_components` of the kit's parts on the meta device, built from
        the configs ``read`` returns (``depth``: that many planned units; the folder's text encoder class)."""
        index = read("", "model_index.json") or {}
        parts = replace(PARTS, text_encoders=(TextEncoder(index_text_encoder(index)),))
        loaded = plan_parts(parts, cfg, read, depth, at_depth=with_units)
        return flux2_components(
            index_pipeline(index, PIPELINES), loaded, TextSettings(max_sequence_length=max_sequence_length(cfg))
        )

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """Caption embeddings at the run's text length and the transformer's ``joint_attention_dim``, as empty
        tensors (the text ids are built per step)."""
        length = comps.state.text.max_sequence_length
        model: Any = comps.model  # the Flux2Transformer2DModel plan_components built
        width = int(model.config.joint_attention_dim)
        return {"prompt_embeds": torch.empty(batch_size, length, width, dtype=cfg.weight_dtype)}
