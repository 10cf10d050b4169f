"""families/zimage/plan.py: the meta components at a chosen depth and the cached captions the planner traces
(full caption length: the loss cuts nothing from a planned batch)."""

from __future__ import annotations

import json

import torch
from zimage_layout import zimage_cfg

from dit_lora.catalogue import by_hub_id
from dit_lora.catalogue.defaults import config_reader
from dit_lora.families.zimage.loss import caption_lengths
from dit_lora.registry import get_family


def test_plan_components_and_conditioning(tmp_path):
    for file, config in by_hub_id("Tongyi-MAI/Z-Image").configs.items():
        (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / file).write_text(json.dumps(config))
    spec = get_family("zimage")
    cfg = zimage_cfg(pretrained_model_name_or_path=str(tmp_path), max_sequence_length=40)
    assert spec.plan.depth_key == ("transformer/config.json", "n_layers")
    comps = spec.plan.plan_components(cfg, config_reader(cfg.model), depth=2)
    assert comps.model.device.type == "meta" and len(comps.model.layers) == 2
    assert len(comps.model.noise_refiner) == 2 and comps.state.text.max_sequence_length == 40
    assert type(comps.encoders["text_encoder"]).__name__ == "Qwen3Model"
    cond = spec.plan.plan_conditioning(comps, cfg, 3)
    assert cond["prompt_embeds"].shape == (3, 40, 2560) and cond["prompt_embeds"].dtype == torch.bfloat16
    assert caption_lengths(cond) == [40, 40, 40]
