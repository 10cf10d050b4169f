"""The toy PixArt family's loss: epsilon prediction on DDPM, as PixArt-alpha trains.

t uniform in [0, 1000), x_t from ``DDPMScheduler.add_noise`` with the checkpoint's betas (linear 1e-4..0.02), MSE
between the predicted and the true noise. With a learned sigma (``out_channels == 2 * in_channels``) only the
epsilon half enters the loss, as ``PixArtAlphaPipeline`` uses only that half.
"""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionLoss

from .state import run_state

#: the additional conditions of the 1024 px PixArt (resolution, aspect ratio), off for smaller models
NO_ADDED_CONDITIONS = {"resolution": None, "aspect_ratio": None}


class PixArtLoss(DiffusionLoss):
    """``FamilySpec.loss``: the epsilon-prediction DDPM loss (batches prepared by the diffusion base)."""

    def compute_loss(self, comps: Components, model: torch.nn.Module, batch: dict[str, Any],
                     generator: torch.Generator, cfg) -> torch.Tensor:
        """Epsilon-prediction DDPM loss of one micro-batch (random draws from ``generator`` only)."""
        latents = batch["latents"]
        device, bsz = latents.device, latents.shape[0]
        scheduler, state = comps.scheduler, run_state(comps)
        noise = torch.randn(latents.shape, generator=generator, device=device, dtype=latents.dtype)
        timesteps = torch.randint(0, scheduler.config.num_train_timesteps, (bsz,), generator=generator, device=device)
        noisy = scheduler.add_noise(latents, noise, timesteps)
        pred = model(noisy, encoder_hidden_states=batch["prompt_embeds"],
                     encoder_attention_mask=batch["prompt_attention_mask"], timestep=timesteps,
                     added_cond_kwargs=NO_ADDED_CONDITIONS, return_dict=False)[0]
        if state.learned_sigma:  # as PixArtAlphaPipeline: the first in_channels are epsilon
            pred = pred[:, : state.in_channels]
        return ((pred.float() - noise.float()) ** 2).mean()
