"""families/sanavideo/plan.py: the planned components on the meta device, the conditioning and the clip batches."""

from __future__ import annotations

import pytest
import torch
from real_layout import write_configs
from sanavideo_layout import HUB_ID, sanavideo_cfg

from dit_lora.catalogue.defaults import config_reader
from dit_lora.families.sanavideo.info import forget_infos
from dit_lora.registry import get_family


@pytest.fixture
def folder(tmp_path):
    forget_infos()
    return write_configs(HUB_ID, tmp_path / "sv")


def test_planned_components_and_conditioning(folder):
    spec = get_family("sanavideo")
    cfg = sanavideo_cfg(pretrained_model_name_or_path=str(folder))
    assert spec.plan.depth_key == ("transformer/config.json", "num_layers")
    comps = spec.plan.plan_components(cfg, config_reader(cfg.model), depth=2)
    assert comps.model.device.type == "meta" and len(comps.model.transformer_blocks) == 2
    assert type(comps.encoders["vae"]).__name__ == "AutoencoderKLWan"
    assert comps.state.flow_shift == 3.0 and comps.state.latents_std.shape == (1, 16, 1, 1, 1)
    cond = spec.plan.plan_conditioning(comps, cfg, 2)
    assert cond["prompt_embeds"].shape == (2, 300, 2304) and cond["prompt_embeds"].dtype == torch.bfloat16
    assert spec.plan.pixel_batches(cfg) == [("81 x 480 x 832", (cfg.training.train_batch_size, 81, 3, 480, 832))]
