"""Lumina 2's memory plan (:class:`~dit_lora.kit.caption_plan.CaptionPlan`): its components from their
configs on the meta device and the cached caption embeddings with their mask at the run's full caption length.

The transformer's RoPE embedder reads each caption's token count back from its mask, a value a trace on fake tensors
does not have; as in training, it is given the counts the host knows (``model.give_host_counts``): a planned caption
is full."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dit_lora.contract.family import Components
from dit_lora.families.lumina2.encoders import max_sequence_length
from dit_lora.families.lumina2.model import give_host_counts
from dit_lora.families.lumina2.state import Lumina2Run
from dit_lora.kit.caption_plan import CaptionPlan

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


class Lumina2Plan(CaptionPlan):
    """``FamilySpec.plan``: transformer, FLUX.1 VAE and Gemma-2 on the meta device; the main ``layers`` are the blocks
    the planner counts (the two refiner stacks run once each, at every depth)."""

    depth_key = ("transformer/config.json", "num_layers")
    transformer, vae, state = "Lumina2Transformer2DModel", "AutoencoderKL", Lumina2Run
    mask = "prompt_attention_mask"
    text_length = staticmethod(max_sequence_length)

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """The kit's meta components, the RoPE embedder given the planned captions' counts."""
        comps = super().plan_components(cfg, read, depth)
        give_host_counts(comps.model, comps.state)
        return comps
