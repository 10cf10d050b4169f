"""families/sana/model.py: what Sana reads from its configs (defaults, precision notes, buckets) and its loading.

The resolution checks are in test_sizes.py.
"""

from __future__ import annotations

import json

import torch
from sana_configs import sana_cfg

from dit_lora.config import TrainConfig
from dit_lora.registry import get_family


def test_generic_defaults_and_components_from_the_tiny_model(tiny_sana):
    family = get_family("sana")
    cfg = sana_cfg(pretrained_model_name_or_path=str(tiny_sana))
    resolution, why = family.defaults.generic_defaults(cfg.model, cfg.family_options)["resolution"]
    transformer = json.loads((tiny_sana / "transformer" / "config.json").read_text())
    vae = json.loads((tiny_sana / "vae" / "config.json").read_text())
    factor = 2 ** (len(vae["encoder_block_out_channels"]) - 1)  # DC-AE compression
    assert resolution == transformer["sample_size"] * factor and f"sample_size {transformer['sample_size']}" in why
    comps = family.model.load_components(cfg, torch.device("cpu"))
    sigmas, timesteps = comps.state.flow_tables
    assert torch.equal(sigmas, comps.scheduler.sigmas) and torch.equal(timesteps, comps.scheduler.timesteps)
    shift = comps.state.scheduler_config.get("flow_shift") or comps.state.scheduler_config.get("shift") or 1.0
    assert comps.scheduler.config.shift == float(shift)
    assert comps.encoders["vae"].dtype == torch.float32 and comps.model.dtype == cfg.weight_dtype
    assert not any(p.requires_grad for p in comps.model.parameters())


def test_generic_defaults_without_configs_are_empty(tmp_path):
    cfg = sana_cfg(pretrained_model_name_or_path=str(tmp_path))
    assert get_family("sana").defaults.generic_defaults(cfg.model, cfg.family_options) == {}


def test_precision_notes_only_for_fp16_weights_in_bf16():
    family = get_family("sana")
    assert family.notes.precision_notes(sana_cfg(pretrained_model_name_or_path="someone/other-model")) == []
    fp16 = sana_cfg(pretrained_model_name_or_path="Efficient-Large-Model/Sana_600M_1024px_diffusers")
    (note,) = family.notes.precision_notes(fp16)
    assert "fp16" in note and "bf16" in note
    fp32 = sana_cfg(pretrained_model_name_or_path="Efficient-Large-Model/Sana_600M_1024px_diffusers", mixed_precision="no")
    assert family.notes.precision_notes(fp32) == []
    bf16 = sana_cfg(pretrained_model_name_or_path="Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers")
    assert family.notes.precision_notes(bf16) == []


def test_sana_takes_aspect_buckets_in_its_latent_stride():
    """SanaTransformer2DModel patchifies and unpatchifies any grid (what square_only None claims); the stride is
    DC-AE compression x patch size from the configs, 32 for the released models (their defaults, no model named)."""
    from diffusers import SanaTransformer2DModel

    from dit_lora.families.sana.demo import get_tiny_sana_config

    family = get_family("sana")
    cfg = TrainConfig.for_family("sana")
    assert family.image_buckets.square_only() is None and family.image_buckets.bucket_stride(cfg.model) == 32
    torch.manual_seed(0)
    model = SanaTransformer2DModel(**get_tiny_sana_config()["transformer"]).eval()
    channels = model.config.in_channels
    latents = torch.randn(1, channels, 2, 8)  # a 1:4 latent grid
    text = torch.randn(1, 4, model.config.caption_channels)
    with torch.no_grad():
        out = model(latents, encoder_hidden_states=text, timestep=torch.tensor([500])).sample
    assert out.shape == (1, model.config.out_channels or channels, 2, 8)
