"""families/zimage/catalogue.py: Turbo and base are told apart by their scheduler's shift; each gets its defaults."""

from __future__ import annotations

import torch

from dit_lora.catalogue import by_hub_id, entries, match


def _reader(configs):
    def read(sub, name):
        return configs.get(f"{sub}/{name}" if sub else name)

    return read


def test_each_entry_matches_its_own_configs_and_not_the_others():
    found = {e.hub_id: e for e in entries("zimage")}
    assert set(found) == {"Tongyi-MAI/Z-Image", "Tongyi-MAI/Z-Image-Turbo"}
    for hub_id, entry in found.items():
        assert match("zimage", _reader(entry.configs)) is entry
        assert entry.families == ("zimage",) and entry.text_length == 512
        assert entry.defaults["resolution"] == 1024 and entry.stored_dtype == "bf16"
    turbo, base = by_hub_id("Tongyi-MAI/Z-Image-Turbo"), by_hub_id("Tongyi-MAI/Z-Image")
    assert turbo.configs["scheduler/scheduler_config.json"]["shift"] == 3.0
    assert base.configs["scheduler/scheduler_config.json"]["shift"] == 6.0
    assert (turbo.defaults["validation_inference_steps"], turbo.defaults["validation_guidance_scale"]) == (8, 0.0)
    assert (base.defaults["validation_inference_steps"], base.defaults["validation_guidance_scale"]) == (50, 5.0)


def test_the_configs_build_the_real_classes():
    from diffusers import AutoencoderKL, ZImageTransformer2DModel

    from dit_lora.plan.fake import diffusers_on_meta

    entry = by_hub_id("Tongyi-MAI/Z-Image")
    tr = entry.configs["transformer/config.json"]
    model = diffusers_on_meta(ZImageTransformer2DModel, dict(tr, n_layers=1), torch.bfloat16)
    assert len(model.layers) == 1 and len(model.noise_refiner) == len(model.context_refiner) == 2
    assert tr["dim"] // tr["n_heads"] == sum(tr["axes_dims"]) == 128
    vae = diffusers_on_meta(AutoencoderKL, entry.configs["vae/config.json"], torch.float32)
    assert vae.config.latent_channels == tr["in_channels"]
    assert entry.configs["text_encoder/config.json"]["hidden_size"] == tr["cap_feat_dim"]
