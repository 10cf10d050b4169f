"""families/sana/loss.py: the rectified-flow loss and the training tables.

The loss is checked against the formula written out by hand (diffusers' ``train_dreambooth_lora_sana.py``), with a
stand-in denoiser that records what it is given, so every input the transformer sees is pinned too.
"""

from __future__ import annotations

import math

import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.training_utils import (
    compute_density_for_timestep_sampling,
    compute_loss_weighting_for_sd3,
)
from sana_configs import sana_cfg

from helpers import Recorder
from dit_lora.contract.family import Components
from dit_lora.families.sana.state import SanaRun
from dit_lora.modeling.flow_matching import training_scheduler
from dit_lora.registry import get_family



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
    loss = family.loss.compute_loss(comps, denoiser, batch, torch.Generator().manual_seed(5), sana_cfg(weighting_scheme=scheme))
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
    family.loss.compute_loss(comps, late, batch, torch.Generator().manual_seed(0), sana_cfg(logit_mean=4.0))
    family.loss.compute_loss(comps, early, batch, torch.Generator().manual_seed(0), sana_cfg(logit_mean=-4.0, logit_std=0.5))
    assert late.calls[0]["timestep"].max() < 100 < 900 < early.calls[0]["timestep"].min()
    expected, _, _ = _reference_loss(batch, "logit_normal", seed=0, shift=1.0, logit_mean=-4.0, logit_std=0.5)
    early_loss = family.loss.compute_loss(comps, Recorder(), batch, torch.Generator().manual_seed(0),
                                     sana_cfg(logit_mean=-4.0, logit_std=0.5))
    assert torch.equal(early_loss, expected)


def test_loss_builds_the_tables_once_for_hand_built_components():
    family, batch = get_family("sana"), _batch()
    comps = Components(model=None, scheduler=training_scheduler({"shift": 3.0}))
    family.loss.compute_loss(comps, Recorder(), batch, torch.Generator().manual_seed(0), sana_cfg())
    tables = comps.state.flow_tables
    assert torch.equal(tables[0], comps.scheduler.sigmas)
    family.loss.compute_loss(comps, Recorder(), batch, torch.Generator().manual_seed(0), sana_cfg())
    assert comps.state.flow_tables is tables


def test_loss_cuts_the_text_padding_to_the_cached_length():
    family, batch = get_family("sana"), _batch(tokens=10)
    comps = Components(model=None, scheduler=training_scheduler({}), state=SanaRun(text_tokens=6))
    denoiser = Recorder()
    family.loss.compute_loss(comps, denoiser, batch, torch.Generator().manual_seed(0), sana_cfg())
    call = denoiser.calls[0]
    assert call["encoder_hidden_states"].shape == (3, 6, 16) and call["encoder_attention_mask"].shape == (3, 6)
    assert torch.equal(call["encoder_hidden_states"], batch["prompt_embeds"][:, :6])


def test_loss_is_finite_and_gradients_reach_the_prediction():
    family, batch = get_family("sana"), _batch()
    comps = Components(model=None, scheduler=training_scheduler({"shift": 3.0}))
    scale = torch.tensor(0.5, requires_grad=True)
    loss = family.loss.compute_loss(comps, lambda **kw: (kw["hidden_states"] * scale,), batch,
                               torch.Generator().manual_seed(1), sana_cfg())
    loss.backward()
    assert math.isfinite(loss.item()) and scale.grad is not None and scale.grad.abs() > 0
