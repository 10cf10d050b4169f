"""The packed-latent flow loss of FLUX.1 and Chroma, written out by hand from diffusers' train_dreambooth_lora_flux.py
with the pipeline's dynamic shift, for their loss tests to compare against: noise, then ``u`` from the density (the
same generator, in that order), sigma shifted, the packed noisy latents, the weighted MSE of a denoiser that returns
``0.5 x + 0.1`` against ``eps - x0``."""

from __future__ import annotations

import math

import torch
from diffusers import FluxPipeline
from diffusers.pipelines.flux.pipeline_flux import calculate_shift
from diffusers.training_utils import compute_density_for_timestep_sampling, compute_loss_weighting_for_sd3


def hand_computed_loss(latents: torch.Tensor, scheme: str, shift: float | None, seed: int):
    """``(loss, sigmas, packed noisy latents)`` for ``latents`` of shape (B, C, H, W) drawn from ``seed``; ``shift``
    None: FluxPipeline's dynamic shift at the batch's packed token count (mu from the scheduler's defaults)."""
    b, c, h, w = latents.shape
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(latents.shape, generator=gen)
    u = compute_density_for_timestep_sampling(scheme, b, logit_mean=0.0, logit_std=1.0, mode_scale=1.29, generator=gen)
    s = shift if shift is not None else math.exp(calculate_shift((h // 2) * (w // 2)))
    sigmas = s * u / (1 + (s - 1) * u)
    noisy = (1 - sigmas.view(-1, 1, 1, 1)) * latents + sigmas.view(-1, 1, 1, 1) * noise
    packed = FluxPipeline._pack_latents(noisy, b, c, h, w)
    pred = FluxPipeline._unpack_latents(packed * 0.5 + 0.1, h * 8, w * 8, 8)
    weighting = compute_loss_weighting_for_sd3(scheme, sigmas=sigmas)
    return (weighting * ((pred - (noise - latents)) ** 2).flatten(1).mean(1)).mean(), sigmas, packed
