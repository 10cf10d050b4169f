"""families/flux2/loss.py: the rectified-flow loss with FLUX.2's dynamic shift and guidance embedding.

The loss is checked against the formula written out by hand from diffusers' ``train_dreambooth_lora_flux2.py``
(packing, position ids, ``timestep = sigma``) with musubi-tuner's ``flux2_shift`` density, using the pipeline's own
helpers (``Flux2Pipeline._pack_latents`` / ``_prepare_latent_ids`` / ``_prepare_text_ids``), diffusers' FLUX
``calculate_shift`` and the scheduler's ``time_shift``; a stand-in denoiser records what it is given.
"""

from __future__ import annotations

import math

import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler, Flux2Pipeline
from diffusers.pipelines.flux.pipeline_flux import calculate_shift
from diffusers.training_utils import compute_density_for_timestep_sampling, compute_loss_weighting_for_sd3
from flux2_configs import flux2_cfg

from helpers import Recorder
from dit_lora.contract.family import Components
from dit_lora.families.flux2.demo import SCHEDULER_CONFIG
from dit_lora.families.flux2.loss import latent_ids, pack, text_ids, unpack
from dit_lora.families.flux2.state import Flux2Run
from dit_lora.modeling.flow_matching import dynamic_mu, scheduler_shift, shifted_sigmas
from dit_lora.registry import get_family


def shift_sigmas(u, shift):
    """The kit's time shift in the form FLUX.2 writes it (its adapters' bits)."""
    return shifted_sigmas(u, shift, form="1+(s-1)*u")



def _batch(bsz=3, channels=8, height=4, width=6, tokens=10, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return {"latents": torch.randn(bsz, channels, height, width, generator=gen),
            "prompt_embeds": torch.randn(bsz, tokens, 12, generator=gen)}


def _comps(guidance_embeds=True, **scheduler):
    state = Flux2Run(scheduler_config={**SCHEDULER_CONFIG, **scheduler}, guidance_embeds=guidance_embeds)
    return Components(model=None, scheduler=None, state=state)


def _reference(batch, scheme, seed, *, shift=None, logit_mean=0.0, logit_std=1.0):
    """The loss as written out from diffusers' FLUX.2 script, with musubi-tuner's shifted density."""
    latents = batch["latents"]
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(latents.shape, generator=gen)
    u = compute_density_for_timestep_sampling(scheme, latents.shape[0], logit_mean=logit_mean, logit_std=logit_std,
                                              mode_scale=1.29, generator=gen)
    if shift is None:
        shift = math.exp(calculate_shift(latents.shape[2] * latents.shape[3]))  # 256 -> 0.5, 4096 -> 1.15
    sigmas = shift * u / (1 + (shift - 1) * u)
    sigma = sigmas.view(-1, 1, 1, 1)
    noisy = (1 - sigma) * latents + sigma * noise
    packed = Flux2Pipeline._pack_latents(noisy)
    pred = Flux2Pipeline._unpack_latents_with_ids(packed * 0.5 + 0.1, Flux2Pipeline._prepare_latent_ids(latents))
    weighting = compute_loss_weighting_for_sd3(scheme, sigmas=sigmas)
    loss = (weighting * ((pred - (noise - latents)) ** 2).flatten(1).mean(1)).mean()
    return loss, packed, sigmas


@pytest.mark.parametrize("scheme", ["logit_normal", "none", "mode", "sigma_sqrt", "cosmap"])
def test_loss_is_the_hand_computed_flow_matching_loss(scheme):
    family, batch = get_family("flux2"), _batch()
    denoiser = Recorder()
    loss = family.loss.compute_loss(_comps(), denoiser, batch, torch.Generator().manual_seed(5),
                                    flux2_cfg(weighting_scheme=scheme))
    expected, packed, sigmas = _reference(batch, scheme, seed=5)
    assert loss.ndim == 0 and loss.dtype == torch.float32
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-7)
    (call,) = denoiser.calls
    torch.testing.assert_close(call["hidden_states"], packed)
    torch.testing.assert_close(call["timestep"], sigmas)  # the transformer multiplies by 1000 itself
    latents, embeds = batch["latents"], batch["prompt_embeds"]
    assert torch.equal(call["img_ids"], Flux2Pipeline._prepare_latent_ids(latents)[0])
    assert torch.equal(call["txt_ids"], Flux2Pipeline._prepare_text_ids(embeds)[0])
    assert torch.equal(call["encoder_hidden_states"], embeds) and call["return_dict"] is False
    assert torch.equal(call["guidance"], torch.full((3,), 1.0))  # FLUX.2 [dev]: the embedding gets 1.0


def test_guidance_is_the_option_for_dev_and_none_for_klein():
    family, batch = get_family("flux2"), _batch()
    dev, klein = Recorder(), Recorder()
    family.loss.compute_loss(_comps(), dev, batch, torch.Generator().manual_seed(0), flux2_cfg(flux2_train_guidance=3.5))
    family.loss.compute_loss(_comps(guidance_embeds=False), klein, batch, torch.Generator().manual_seed(0), flux2_cfg())
    assert torch.equal(dev.calls[0]["guidance"], torch.full((3,), 3.5)) and klein.calls[0]["guidance"] is None
    assert torch.equal(dev.calls[0]["hidden_states"], klein.calls[0]["hidden_states"])  # nothing else changes


def test_a_fixed_shift_and_a_static_scheduler_replace_the_dynamic_one():
    family, batch = get_family("flux2"), _batch()
    fixed = Recorder()
    loss = family.loss.compute_loss(_comps(), fixed, batch, torch.Generator().manual_seed(2), flux2_cfg(flux2_shift=1.0))
    expected, _, sigmas = _reference(batch, "logit_normal", seed=2, shift=1.0)
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(fixed.calls[0]["timestep"], sigmas)
    assert scheduler_shift(4096, {**SCHEDULER_CONFIG, "use_dynamic_shifting": False}, None) == 3.0
    assert scheduler_shift(4096, SCHEDULER_CONFIG, 2.5) == 2.5
    # a linear time_shift_type: the scheduler shifts by mu itself at inference, so training does too
    linear = {**SCHEDULER_CONFIG, "time_shift_type": "linear"}
    assert scheduler_shift(4096, linear, None) == pytest.approx(dynamic_mu(4096, linear))


def test_the_shift_is_the_pipeline_schedulers_own():
    """mu on the scheduler config's line (diffusers' FLUX calculate_shift), the shift its exponential time_shift,
    and the scheduler's own set_timesteps(sigmas=..., mu=...) lands on the same sigmas."""
    scheduler = FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG)
    for tokens in (16, 256, 1024, 4096, 6400):
        assert dynamic_mu(tokens, SCHEDULER_CONFIG) == pytest.approx(calculate_shift(tokens), abs=1e-12)
    assert dynamic_mu(256, SCHEDULER_CONFIG) == pytest.approx(0.5) and dynamic_mu(4096, SCHEDULER_CONFIG) == pytest.approx(1.15)
    u = torch.linspace(0.05, 1.0, 20, dtype=torch.float64)
    mu = dynamic_mu(4096, SCHEDULER_CONFIG)
    torch.testing.assert_close(shift_sigmas(u, math.exp(mu)), scheduler.time_shift(mu, 1.0, u))
    scheduler.set_timesteps(sigmas=u.flip(0).tolist(), mu=mu)
    torch.testing.assert_close(scheduler.sigmas[:-1].double(), shift_sigmas(u.flip(0), math.exp(mu)), rtol=1e-6, atol=1e-6)
    # at 1024 px (4096 tokens) timesteps lean noisy: the median sigma of the default density is above 1/2
    assert shift_sigmas(torch.tensor(0.5), math.exp(mu)) > 0.75


def test_packing_and_ids_match_the_pipeline():
    latents = torch.randn(2, 8, 3, 5)
    assert torch.equal(pack(latents), Flux2Pipeline._pack_latents(latents))
    assert torch.equal(unpack(pack(latents), 3, 5), latents)
    assert torch.equal(latent_ids(3, 5, "cpu"), Flux2Pipeline._prepare_latent_ids(latents)[0])
    assert torch.equal(text_ids(7, "cpu"), Flux2Pipeline._prepare_text_ids(torch.zeros(2, 7, 4))[0])


def test_loss_is_finite_and_gradients_reach_the_prediction():
    family, batch = get_family("flux2"), _batch()
    scale = torch.tensor(0.5, requires_grad=True)
    loss = family.loss.compute_loss(_comps(), lambda **kw: (kw["hidden_states"] * scale,), batch,
                                    torch.Generator().manual_seed(1), flux2_cfg())
    loss.backward()
    assert math.isfinite(loss.item()) and scale.grad is not None and scale.grad.abs() > 0
