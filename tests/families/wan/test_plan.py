"""families/wan/plan.py: the memory plan's components build on the meta device for every wan_model variant (one
expert on the device with offloading, both without)."""

from __future__ import annotations

import pytest
import torch

from dit_lora.catalogue.defaults import config_reader
from dit_lora.config import TrainConfig
from dit_lora.families.wan.demo import WAN_DEMO_VARIANTS
from dit_lora.families.wan.experts import WanExperts
from dit_lora.registry import get_family

FAMILY = {"2.1-t2v": "wan", "2.1-i2v": "wan_i2v", "2.2-ti2v": "wan", "2.2-t2v-a14b": "wan", "2.2-i2v-a14b": "wan_i2v"}


pytestmark = pytest.mark.usefixtures("wan_offline")  # the shared fixtures: conftest.py


def _cfg(path, family="wan", **values) -> TrainConfig:
    return TrainConfig.for_family(family, pretrained_model_name_or_path=str(path), train_data_dir="clips", **values)


@pytest.mark.parametrize("variant", WAN_DEMO_VARIANTS)
def test_plan_components_build_on_meta(wan_model, variant):
    family = get_family(FAMILY[variant])
    cfg = _cfg(wan_model(variant), FAMILY[variant])
    comps = family.plan.plan_components(cfg, config_reader(cfg.model), 2)
    params = list(comps.model.parameters()) + list(comps.encoders["vae"].parameters())
    assert params and all(p.is_meta for p in params)
    assert len(comps.model.blocks) == 2  # the requested depth, not the config's
    assert comps.model.dtype == torch.bfloat16 and comps.encoders["vae"].dtype == torch.float32
    # --wan_expert both with offload (the default): only one expert is on the device at a time
    assert not isinstance(comps.model, WanExperts)
    if variant == "2.1-i2v":
        clip = config_reader(cfg.model)("image_encoder", "config.json")  # CLIP: one token per patch plus the class token
        assert comps.state.clip_tokens == (clip["image_size"] // clip["patch_size"]) ** 2 + 1
    batches = family.plan.plan_batches(cfg, comps)
    assert batches and all(b["latents"].shape[1] == comps.model.config.out_channels for _, b in batches)


def test_plan_without_offload_holds_both_experts(wan_model):
    family = get_family("wan")
    cfg = _cfg(wan_model("2.2-t2v-a14b"), offload_inactive_expert=False)
    comps = family.plan.plan_components(cfg, config_reader(cfg.model), 1)
    assert isinstance(comps.model, WanExperts) and comps.model.high.device.type == "meta"
    high = _cfg(wan_model("2.2-t2v-a14b"), wan_expert="high", offload_inactive_expert=False)
    assert not isinstance(family.plan.plan_components(high, config_reader(high.model), 1).model, WanExperts)
