"""families/ltx2/plan.py: the plan builds every loaded part on the meta device and a batch whose sound spans the
worst bucket at the model's rate; the published checkpoint plans without a download."""

from __future__ import annotations

from ltx2_configs import ltx2_cfg

from dit_lora.catalogue.defaults import config_reader
from dit_lora.registry import get_family


def test_the_plan_batch_carries_the_sound_of_the_worst_bucket():
    cfg = ltx2_cfg("Lightricks/LTX-2", max_sequence_length=1024)
    plan = get_family("ltx2").plan
    comps = plan.plan_components(cfg, config_reader(cfg.model), depth=2)
    assert {"vae", "text_encoder", "audio_vae", "connectors"} <= set(comps.encoders)
    assert all(p.is_meta for p in comps.model.parameters())
    cond = plan.plan_conditioning(comps, cfg, 1)
    assert cond["prompt_embeds"].shape == (1, 1024, 3840) and cond["audio_prompt_embeds"].shape == (1, 1024, 3840)
    # 121 frames at 24 fps: 5.04 s, 126 latent steps of 8 channels x 16 mel bins
    assert cond["audio_latents"].shape == (1, 126, 128) and cond["fps"] == 24.0
    off = plan.plan_conditioning(plan.plan_components(ltx2_cfg("Lightricks/LTX-2", audio="off"),
                                                      config_reader(cfg.model), depth=2), cfg, 1)
    assert "audio_latents" not in off
