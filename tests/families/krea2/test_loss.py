"""Krea 2's loss, written out by hand from diffusers' train_dreambooth_lora_krea2.py with the pipeline's dynamic
shift (mu from the image's token count on the 256 to 6400 line): the packed noisy latents, sigma as the timestep, no
guidance, the pipeline's position ids and the boolean caption mask, the weighted MSE against ``eps - x0``."""

from __future__ import annotations

import math

import pytest
import torch
from diffusers import Krea2Pipeline
from diffusers.pipelines.flux.pipeline_flux import calculate_shift
from diffusers.training_utils import compute_density_for_timestep_sampling, compute_loss_weighting_for_sd3

from helpers import Recorder
from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.krea2.state import Krea2Run
from dit_lora.registry import get_family

SCHEDULER = {"base_image_seq_len": 256, "base_shift": 0.5, "max_image_seq_len": 6400, "max_shift": 1.15,
             "shift": 1.0, "use_dynamic_shifting": True}


@pytest.mark.parametrize("scheme, shift", [("none", None), ("logit_normal", None), ("none", 3.0)])
def test_loss_is_the_hand_computed_flow_matching_loss(scheme, shift):
    gen = torch.Generator().manual_seed(0)
    latents = torch.randn(2, 4, 6, 8, generator=gen)
    mask = torch.arange(10).expand(2, 10) <= torch.tensor([[3], [9]])
    batch = {"latents": latents, "prompt_embeds": torch.randn(2, 10, 3, 12, generator=gen), "prompt_embeds_mask": mask}
    denoiser = Recorder()
    comps = Components(model=None, scheduler=None, state=Krea2Run(scheduler_config=SCHEDULER))
    cfg = TrainConfig.for_family("krea2", pretrained_model_name_or_path="m", weighting_scheme=scheme, krea2_shift=shift)
    loss = get_family("krea2").loss.compute_loss(comps, denoiser, batch, torch.Generator().manual_seed(5), cfg)
    # by hand: noise first, then u, from the same generator
    gen = torch.Generator().manual_seed(5)
    noise = torch.randn(latents.shape, generator=gen)
    u = compute_density_for_timestep_sampling(scheme, 2, logit_mean=0.0, logit_std=1.0, mode_scale=1.29, generator=gen)
    s = shift if shift is not None else math.exp(calculate_shift(12, 256, 6400, 0.5, 1.15))
    sigmas = s * u / (1 + (s - 1) * u)
    noisy = (1 - sigmas.view(-1, 1, 1, 1)) * latents + sigmas.view(-1, 1, 1, 1) * noise
    pipe = Krea2Pipeline(scheduler=None, vae=None, text_encoder=None, tokenizer=None, transformer=None)
    packed = pipe._pack_latents(noisy, 2, 4, 6, 8)
    pred = pipe._unpack_latents(packed * 0.5 + 0.1, 6 * 8, 8 * 8)[:, :, 0]  # the Recorder's prediction
    weighting = compute_loss_weighting_for_sd3(scheme, sigmas=sigmas)
    expected = (weighting * ((pred - (noise - latents)) ** 2).flatten(1).mean(1)).mean()
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-7)
    (call,) = denoiser.calls
    torch.testing.assert_close(call["hidden_states"], packed)
    torch.testing.assert_close(call["timestep"], sigmas)  # the pipeline passes t / 1000
    assert "guidance" not in call and torch.equal(call["encoder_attention_mask"], mask)
    assert torch.equal(call["position_ids"], pipe.prepare_position_ids(10, 3, 4, "cpu"))
