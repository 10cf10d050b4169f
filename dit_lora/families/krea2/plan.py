"""Krea 2's memory plan: its components from their configs on the meta device and the cached caption states (one
per tapped layer, at the run's caption length)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.krea2.encoders import max_sequence_length
from dit_lora.families.krea2.model import PARTS, krea2_components
from dit_lora.families.krea2.state import Krea2Run
from dit_lora.kit.components import DiffusionPlan
from dit_lora.kit.loader import plan_parts

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


class Krea2Plan(DiffusionPlan):
    """``FamilySpec.plan``: transformer, VAE and Qwen3-VL on the meta device; the caption states ``(B, L, layers,
    width)`` at the run's caption length with their mask."""

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None, depth_key: str = "num_layers"):
        """:func:`~dit_lora.families.krea2.model.krea2_components` of the kit's parts on the meta device, built from
        the configs ``read`` returns (``depth``: that many blocks)."""
        loaded = plan_parts(PARTS, cfg, read, depth, depth_key)
        return krea2_components(loaded, Krea2Run(text=max_sequence_length.settings(cfg.data)))

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """The caption states at the transformer's ``num_text_layers`` x ``text_hidden_dim`` and their boolean mask,
        as empty tensors."""
        model: Any = comps.model  # the Krea2Transformer2DModel plan_components built
        length, config = comps.state.text.max_sequence_length, model.config
        shape = (batch_size, length, int(config.num_text_layers), int(config.text_hidden_dim))
        return {
            "prompt_embeds": torch.empty(shape, dtype=cfg.weight_dtype),
            "prompt_embeds_mask": torch.ones(batch_size, length, dtype=torch.bool),
        }
