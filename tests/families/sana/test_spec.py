"""families/sana/spec.py: the rectified-flow loss, the training tables, and the settings a run derives from the model.

The loss is checked against the formula written out by hand (diffusers' ``train_dreambooth_lora_sana.py``), with a
stand-in denoiser that records what it is given, so every input the transformer sees is pinned too. The resolution
checks are in test_sizes.py.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.training_utils import compute_density_for_timestep_sampling, compute_loss_weighting_for_sd3

from dit_lora.config import TrainConfig
from dit_lora.registry import get_family
from dit_lora.contract.family import Components
from dit_lora.modeling.flow_matching import training_scheduler


class Recorder:
    """A denoiser that records its keyword arguments and returns a simple function of its input."""

    def __init__(self):
        self.calls = []

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        return (kwargs["hidden_states"] * 0.5 + 0.1,)


def _cfg(**values) -> TrainConfig:
    """A Sana config built in code; with options by owner the Sana and flow-matching options go to family_options."""
    values = {"pretrained_model_name_or_path": "unused/sana", "train_data_dir": "unused", "resolution": 64, **values}
    make = getattr(TrainConfig, "for_family", None)
    return make("sana", **values) if make else TrainConfig(**values)


def _batch(bsz=3, shape=(4, 8, 6), tokens=10, seed=0):
    gen = torch.Generator().manual_seed(seed)
    mask = torch.ones(bsz, tokens, dtype=torch.long)
    mask[0, 4:] = 0
    return {"latents": torch.randn(bsz, *shape, generator=gen),
            "prompt_embeds": torch.randn(bsz, tokens, 16, generator=gen),
            "prompt_attention_mask": mask}


def _reference_loss(batch, scheme, seed, shift=3.0, logit_mean=0.0, logit_std=1.0, mode_scale=1.29):
    """The loss written out as diffusers' Sana LoRA script computes it, with the Recorder's prediction."""
    latents = batch["latents"]
    gen = torch.Generator().manual_seed(seed)
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=shift)
    noise = torch.randn(latents.shape, generator=gen, dtype=latents.dtype)
    u = compute_density_for_timestep_sampling(scheme, latents.shape[0], logit_mean=logit_mean, logit_std=logit_std,
                                              mode_scale=mode_scale, generator=gen)
    indices = (u * 1000).long().clamp(max=999)
    sigmas = scheduler.sigmas[indices].to(latents.dtype)
    sigma = sigmas.view(-1, 1, 1, 1)
    noisy = (1 - sigma) * latents + sigma * noise
    pred = noisy * 0.5 + 0.1
    weighting = compute_loss_weighting_for_sd3(scheme, sigmas=sigmas)
    loss = (weighting * ((pred - (noise - latents)) ** 2).flatten(1).mean(1)).mean()
    return loss, noisy, scheduler.timesteps[indices]


@pytest.mark.parametrize("scheme", ["logit_normal", "mode", "none", "sigma_sqrt", "cosmap"])
def test_loss_is_the_rectified_flow_loss(scheme):
    family, batch = get_family("sana"), _batch()
    comps = Components(model=None, scheduler=training_scheduler({"flow_shift": 3.0}))
    denoiser = Recorder()
    loss = family.compute_loss(comps, denoiser, batch, torch.Generator().manual_seed(5), _cfg(weighting_scheme=scheme))
    expected, noisy, timesteps = _reference_loss(batch, scheme, seed=5)
    assert loss.ndim == 0 and loss.dtype == torch.float32
    assert torch.equal(loss, expected)
    (call,) = denoiser.calls
    assert torch.equal(call["hidden_states"], noisy) and torch.equal(call["timestep"], timesteps)
    assert call["return_dict"] is False


def test_loss_reads_the_timestep_density_options():
    family, batch = get_family("sana"), _batch(bsz=8)
    comps = Components(model=None, scheduler=training_scheduler({"shift": 1.0}))
    late, early = Recorder(), Recorder()
    family.compute_loss(comps, late, batch, torch.Generator().manual_seed(0), _cfg(logit_mean=4.0))
    family.compute_loss(comps, early, batch, torch.Generator().manual_seed(0), _cfg(logit_mean=-4.0, logit_std=0.5))
    assert late.calls[0]["timestep"].max() < 100 < 900 < early.calls[0]["timestep"].min()
    expected, _, _ = _reference_loss(batch, "logit_normal", seed=0, shift=1.0, logit_mean=-4.0, logit_std=0.5)
    early_loss = family.compute_loss(comps, Recorder(), batch, torch.Generator().manual_seed(0),
                                     _cfg(logit_mean=-4.0, logit_std=0.5))
    assert torch.equal(early_loss, expected)


def test_loss_builds_the_tables_once_for_hand_built_components():
    family, batch = get_family("sana"), _batch()
    comps = Components(model=None, scheduler=training_scheduler({"shift": 3.0}))
    family.compute_loss(comps, Recorder(), batch, torch.Generator().manual_seed(0), _cfg())
    tables = comps.extras["flow_tables"]
    assert torch.equal(tables[0], comps.scheduler.sigmas)
    family.compute_loss(comps, Recorder(), batch, torch.Generator().manual_seed(0), _cfg())
    assert comps.extras["flow_tables"] is tables


def test_loss_cuts_the_text_padding_to_the_cached_length():
    family, batch = get_family("sana"), _batch(tokens=10)
    comps = Components(model=None, scheduler=training_scheduler({}), extras={"text_tokens": 6})
    denoiser = Recorder()
    family.compute_loss(comps, denoiser, batch, torch.Generator().manual_seed(0), _cfg())
    call = denoiser.calls[0]
    assert call["encoder_hidden_states"].shape == (3, 6, 16) and call["encoder_attention_mask"].shape == (3, 6)
    assert torch.equal(call["encoder_hidden_states"], batch["prompt_embeds"][:, :6])


def test_loss_is_finite_and_gradients_reach_the_prediction():
    family, batch = get_family("sana"), _batch()
    comps = Components(model=None, scheduler=training_scheduler({"shift": 3.0}))
    scale = torch.tensor(0.5, requires_grad=True)
    loss = family.compute_loss(comps, lambda **kw: (kw["hidden_states"] * scale,), batch,
                               torch.Generator().manual_seed(1), _cfg())
    loss.backward()
    assert math.isfinite(loss.item()) and scale.grad is not None and scale.grad.abs() > 0


def test_generic_defaults_and_components_from_the_tiny_model(tiny_sana):
    family = get_family("sana")
    cfg = _cfg(pretrained_model_name_or_path=str(tiny_sana))
    resolution, why = family.generic_defaults(cfg)["resolution"]
    transformer = json.loads((tiny_sana / "transformer" / "config.json").read_text())
    vae = json.loads((tiny_sana / "vae" / "config.json").read_text())
    factor = 2 ** (len(vae["encoder_block_out_channels"]) - 1)  # DC-AE compression
    assert resolution == transformer["sample_size"] * factor and f"sample_size {transformer['sample_size']}" in why
    comps = family.load_components(cfg, torch.device("cpu"))
    sigmas, timesteps = comps.extras["flow_tables"]
    assert torch.equal(sigmas, comps.scheduler.sigmas) and torch.equal(timesteps, comps.scheduler.timesteps)
    shift = comps.extras["scheduler_config"].get("flow_shift") or comps.extras["scheduler_config"].get("shift") or 1.0
    assert comps.scheduler.config.shift == float(shift)
    assert comps.encoders["vae"].dtype == torch.float32 and comps.model.dtype == cfg.weight_dtype
    assert not any(p.requires_grad for p in comps.model.parameters())


def test_generic_defaults_without_configs_are_empty(tmp_path):
    cfg = _cfg(pretrained_model_name_or_path=str(tmp_path))
    assert get_family("sana").generic_defaults(cfg) == {}


def test_usage_snippet_card_and_license():
    family = get_family("sana")
    cfg = _cfg(pretrained_model_name_or_path="Efficient-Large-Model/Sana_600M_1024px_diffusers",
               complex_human_instruction=False, validation_prompt='a "cat"')
    snippet = family.usage_snippet(cfg, "me/adapter")
    assert 'pipe.load_lora_weights("me/adapter")' in snippet and "complex_human_instruction=None" in snippet
    assert '"a \\"cat\\""' in snippet
    compile(snippet, "snippet", "exec")
    assert "complex_human_instruction=None" not in family.usage_snippet(_cfg(complex_human_instruction=True), "x")
    settings = family.card_settings(cfg)
    assert settings["weighting_scheme"] == "logit_normal" and settings["max_sequence_length"] == 300
    assert family.base_model_license(cfg) == "other" and family.base_model_license(_cfg()) is None


def test_precision_notes_only_for_fp16_weights_in_bf16():
    family = get_family("sana")
    assert family.precision_notes(_cfg(pretrained_model_name_or_path="someone/other-model")) == []
    fp16 = _cfg(pretrained_model_name_or_path="Efficient-Large-Model/Sana_600M_1024px_diffusers")
    (note,) = family.precision_notes(fp16)
    assert "fp16" in note and "bf16" in note
    fp32 = _cfg(pretrained_model_name_or_path="Efficient-Large-Model/Sana_600M_1024px_diffusers", mixed_precision="no")
    assert family.precision_notes(fp32) == []
    bf16 = _cfg(pretrained_model_name_or_path="Efficient-Large-Model/Sana_1600M_1024px_BF16_diffusers")
    assert family.precision_notes(bf16) == []


def test_cache_identity_names_what_changes_the_embeddings():
    family = get_family("sana")
    base = family.cache_identity(_cfg(max_sequence_length=None))
    assert base["family"] == "sana" and base["max_sequence_length"] == 300
    assert family.cache_identity(_cfg(max_sequence_length=120))["max_sequence_length"] == 120
    assert base["complex_human_instruction"] is True
    assert family.cache_identity(_cfg(max_sequence_length=None, complex_human_instruction=False)) != base


def test_sana_takes_aspect_buckets_in_its_latent_stride():
    """SanaTransformer2DModel patchifies and unpatchifies any grid (what square_only None claims); the stride is
    DC-AE compression x patch size from the configs, 32 for the released models (their defaults, no model named)."""
    from diffusers import SanaTransformer2DModel

    from dit_lora.families.sana.demo import get_tiny_sana_config

    family = get_family("sana")
    cfg = TrainConfig.for_family("sana")
    assert family.square_only(cfg) is None and family.bucket_stride(cfg) == 32
    torch.manual_seed(0)
    model = SanaTransformer2DModel(**get_tiny_sana_config()["transformer"]).eval()
    channels = model.config.in_channels
    latents = torch.randn(1, channels, 2, 8)  # a 1:4 latent grid
    text = torch.randn(1, 4, model.config.caption_channels)
    with torch.no_grad():
        out = model(latents, encoder_hidden_states=text, timestep=torch.tensor([500])).sample
    assert out.shape == (1, model.config.out_channels or channels, 2, 8)
