"""families/dit/plan.py: the meta components and the class labels the planner traces."""

from __future__ import annotations

import torch

from dit_lora.catalogue.defaults import config_reader
from dit_lora.config import TrainConfig
from dit_lora.registry import get_family


def test_plan_components_and_conditioning(tiny_dit):
    spec = get_family("dit")
    cfg = TrainConfig.for_family("dit", pretrained_model_name_or_path=str(tiny_dit), resolution=64)
    comps = spec.plan.plan_components(cfg, config_reader(cfg.model), depth=2)
    assert comps.model.device.type == "meta" and len(comps.model.transformer_blocks) == 2
    assert comps.state.null_class == comps.state.base_num_classes == 1000
    cond = spec.plan.plan_conditioning(comps, cfg, 3)
    assert cond["class_labels"].shape == (3,) and cond["class_labels"].dtype == torch.long
    assert spec.plan.pixel_batches(cfg) == [("64 x 64 px", (cfg.training.train_batch_size, 3, 64, 64))]  # squares only
