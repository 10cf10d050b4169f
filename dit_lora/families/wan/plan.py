"""Wan's memory plan: the trained expert(s), UMT5 and the VAE on the meta device, clips of the worst bucket."""

from __future__ import annotations

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.wan.info import TEXT_LEN, WanTask
from dit_lora.families.wan.model import plan_wan_components, trained_experts
from dit_lora.kit.components import DiffusionPlan
from dit_lora.kit.video_sizes import ClipPlan


class WanPlan(ClipPlan, DiffusionPlan):
    """``FamilySpec.plan``: the trained expert(s), UMT5 and the VAE on the meta device; clips of the worst bucket."""

    task: WanTask

    def plan_components(self, cfg: TrainConfig, read, depth: int | None = None) -> Components:
        """:func:`plan_wan_components`."""
        return plan_wan_components(self.task, cfg, read, depth)

    def blocks_wait_for_cache(self, cfg: TrainConfig) -> bool:
        """One transformer's blocks wait in host memory while the cache is built; A14B's two experts are placed by
        :class:`~dit_lora.families.wan.experts.WanExperts` (as :func:`load_wan_components` parks them)."""
        return len(trained_experts(self.task, cfg.model, cfg.family_options)) == 1

    def plan_conditioning(self, comps: Components, cfg: TrainConfig, batch_size: int) -> dict[str, torch.Tensor]:
        """UMT5 embeddings of every prompt padded to 512 tokens, as empty tensors."""
        text = comps.encoders["text_encoder"].config.d_model
        return {"prompt_embeds": torch.empty(batch_size, TEXT_LEN, text, dtype=cfg.weight_dtype)}
