"""families/sana/plan.py: the meta components and the cached text conditioning the planner traces."""

from __future__ import annotations

import torch

from dit_lora.catalogue.defaults import config_reader
from dit_lora.config import TrainConfig
from dit_lora.registry import get_family


def test_plan_components_and_conditioning_follow_the_runs_text_length(tiny_sana):
    spec = get_family("sana")
    cfg = TrainConfig.for_family("sana", pretrained_model_name_or_path=str(tiny_sana), resolution=64,
                                 max_sequence_length=40)
    comps = spec.plan.plan_components(cfg, config_reader(cfg.model), depth=2)
    assert comps.model.device.type == "meta" and len(comps.model.transformer_blocks) == 2
    assert comps.state.text.max_sequence_length == 40
    cond = spec.plan.plan_conditioning(comps, cfg, 3)
    width = comps.encoders["text_encoder"].config.hidden_size
    assert cond["prompt_embeds"].shape == (3, 40, width) and cond["prompt_attention_mask"].shape == (3, 40)
    assert cond["prompt_embeds"].dtype == cfg.weight_dtype and cond["prompt_attention_mask"].dtype == torch.long
