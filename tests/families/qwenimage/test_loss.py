"""families/qwenimage/loss.py: the flow-matching loss on the packed latent, checked against a hand computation of
diffusers' ``train_dreambooth_lora_qwen_image.py`` / musubi-tuner's ``qwen_shift`` with a recording denoiser."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from diffusers import QwenImagePipeline
from diffusers.training_utils import compute_density_for_timestep_sampling, compute_loss_weighting_for_sd3

from helpers import Recorder
from dit_lora.config.schema import DataOptions
from dit_lora.contract.family import Components
from dit_lora.catalogue.files import catalogue_of
from dit_lora.families.qwenimage.loss import QwenImageLoss, draw_sigmas, pack_latents
from dit_lora.families.qwenimage.state import QwenImageRun

ENTRIES = catalogue_of("dit_lora.families.qwenimage").entries

CONFIG = ENTRIES[0].configs["scheduler/scheduler_config.json"]



def _options(scheme="logit_normal", mode="dynamic", fixed=2.2):
    return SimpleNamespace(weighting_scheme=scheme, logit_mean=0.0, logit_std=1.0, mode_scale=1.29,
                           qwen_shift_mode=mode, qwen_fixed_shift=fixed)


def test_pack_latents_is_the_pipelines():
    latents = torch.randn(2, 16, 6, 10)
    expected = QwenImagePipeline._pack_latents(latents, 2, 16, 6, 10)
    assert torch.equal(pack_latents(latents), expected)


@pytest.mark.parametrize("scheme,mode", [("logit_normal", "dynamic"), ("none", "none"), ("sigma_sqrt", "fixed")])
def test_loss_matches_the_hand_computation(scheme, mode):
    gen = torch.Generator().manual_seed(0)
    latents = torch.randn(3, 4, 8, 12, generator=gen)
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[0, 5:] = 0
    batch = {"latents": latents, "prompt_embeds": torch.randn(3, 10, 16, generator=gen), "prompt_embeds_mask": mask}
    comps = Components(model=None, state=QwenImageRun(scheduler_config=dict(CONFIG), text_tokens=8))
    cfg = SimpleNamespace(family_options=_options(scheme, mode), data=DataOptions())
    recorder = Recorder()
    loss = QwenImageLoss(None).compute_loss(comps, recorder, batch, torch.Generator().manual_seed(7), cfg)

    # by hand: noise, then u, from one generator; the shift for 4 x 6 = 24 packed tokens
    ref = torch.Generator().manual_seed(7)
    noise = torch.randn(latents.shape, generator=ref)
    u = compute_density_for_timestep_sampling(scheme, 3, logit_mean=0.0, logit_std=1.0, mode_scale=1.29, generator=ref)
    mu = 0.5 + (24 - 256) * 0.4 / (8192 - 256)
    factor = {"dynamic": math.exp(mu), "none": 1.0, "fixed": 2.2}[mode]
    sigmas = factor * u / (1 + (factor - 1) * u)
    noisy = (1 - sigmas.view(-1, 1, 1, 1)) * latents + sigmas.view(-1, 1, 1, 1) * noise
    pred = QwenImagePipeline._pack_latents(noisy, 3, 4, 8, 12) * 0.5 + 0.1
    target = QwenImagePipeline._pack_latents(noise - latents, 3, 4, 8, 12)
    weighting = compute_loss_weighting_for_sd3(scheme, sigmas=sigmas)
    expected = (weighting * ((pred - target) ** 2).flatten(1).mean(1)).mean()
    torch.testing.assert_close(loss, expected)

    call = recorder.calls[0]
    torch.testing.assert_close(call["timestep"], sigmas)  # the pipeline's t / 1000
    assert call["img_shapes"] == [[(1, 4, 6)]] * 3  # the pipeline's list of each sample's image shapes
    assert call["encoder_hidden_states"].shape[1] == 8 and torch.equal(call["encoder_hidden_states_mask"], mask[:, :8])


def test_draw_sigmas_stays_in_zero_one_and_follows_the_resolution():
    options = _options()
    small = draw_sigmas(torch.zeros(256, 4, 8, 8), CONFIG, options, torch.Generator().manual_seed(0))[1]
    large = draw_sigmas(torch.zeros(256, 4, 166, 166), CONFIG, options, torch.Generator().manual_seed(0))[1]
    assert 0 <= float(small.min()) and float(large.max()) <= 1
    assert float(large.mean()) > float(small.mean()) + 0.03  # a larger shift (2.3 against 1.6) at more tokens: noisier on average
