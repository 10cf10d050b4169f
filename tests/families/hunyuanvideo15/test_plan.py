"""families/hunyuanvideo15/plan.py: the published 480p checkpoint planned on the meta device, the 8.3B transformer
counted, its cached conditioning shaped as the cache holds it."""

from __future__ import annotations

import pytest

from dit_lora.config import TrainConfig


@pytest.mark.parametrize("family", ["hunyuanvideo15", "hunyuanvideo15_i2v"])
def test_the_published_checkpoint_plans_its_parts_and_conditioning(family):
    from dit_lora.catalogue.defaults import config_reader
    from dit_lora.registry import get_spec

    hub = "480p_i2v" if family.endswith("i2v") else "480p_t2v"
    cfg = TrainConfig.for_family(family, pretrained_model_name_or_path=f"hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-{hub}")
    plan = get_spec(family).plan
    read = config_reader(cfg.model)
    comps = plan.plan_components(cfg, read, depth=2)
    assert comps.model.config.num_layers == 2 and comps.state.text.max_sequence_length == 1000
    cond = plan.plan_conditioning(comps, cfg, 1)
    assert cond["prompt_embeds"].shape == (1, 1000, 3584) and cond["prompt_embeds_2"].shape == (1, 256, 1472)
    assert ("image_embeds" in cond) == family.endswith("i2v")
    assert set(comps.encoders) >= {"vae", "text_encoder", "text_encoder_2"}
