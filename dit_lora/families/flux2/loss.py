"""FLUX.2's loss: rectified flow on the patchified, normalised latents, the timesteps drawn from the run's density
and shifted per batch by the checkpoint's dynamic shift, the guidance embedding of FLUX.2 [dev] fed a fixed value.

As diffusers' ``train_dreambooth_lora_flux2.py`` / ``_klein.py`` and musubi-tuner's ``flux_2_train_network.py``:
``x_t = (1 - sigma) x0 + sigma eps``, the packed tokens ``(B, H*W, C)`` with their ``(t, h, w, l)`` position ids, the
transformer given ``timestep = sigma`` (it multiplies by 1000 itself), the target ``eps - x0``, the per-sample MSE
weighted by ``compute_loss_weighting_for_sd3``. The density: ``u`` from ``compute_density_for_timestep_sampling``
(logit-normal by default, as musubi-tuner's ``flux2_shift``), then ``sigma = s u / (1 + (s - 1) u)``, continuous,
with ``s`` the scheduler's shift at the batch's token count (the kit's ``scheduler_shift``: ``exp(mu)`` on the
config's line from ``base_shift`` to ``max_shift``; musubi-tuner, ai-toolkit; ``--flux2_shift`` fixes it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionLoss
from dit_lora.families.flux2.state import run_state
from dit_lora.modeling.flow_matching import (
    loss_weighting,
    noise_and_sigmas,
    noisy_latents,
    scheduler_shift,
    velocity_target,
)
from dit_lora.modeling.masked_loss import weighted_or_masked_mse

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def latent_ids(height: int, width: int, device) -> torch.Tensor:
    """``Flux2Pipeline._prepare_latent_ids`` of one ``height x width`` token grid, ``(H*W, 4)`` rows ``(0, h, w, 0)``,
    built on ``device`` (no host copy per step)."""
    zero = torch.zeros(1, dtype=torch.long, device=device)
    grid = torch.arange(height, device=device), torch.arange(width, device=device)
    return torch.cartesian_prod(zero, grid[0], grid[1], zero)


def text_ids(length: int, device) -> torch.Tensor:
    """``Flux2Pipeline._prepare_text_ids`` of one caption, ``(L, 4)`` rows ``(0, 0, 0, l)``, built on ``device``."""
    zero = torch.zeros(1, dtype=torch.long, device=device)
    return torch.cartesian_prod(zero, zero, zero, torch.arange(length, device=device))


def pack(latents: torch.Tensor) -> torch.Tensor:
    """``Flux2Pipeline._pack_latents``: ``(B, C, H, W) -> (B, H*W, C)``."""
    return latents.flatten(2).transpose(1, 2)


def unpack(tokens: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The inverse of :func:`pack` (``_unpack_latents_with_ids`` for the ids of :func:`latent_ids`)."""
    return tokens.transpose(1, 2).reshape(tokens.shape[0], tokens.shape[2], height, width)


class Flux2Loss(DiffusionLoss):
    """``FamilySpec.loss``: the rectified-flow loss of one micro-batch (batches prepared by the diffusion base)."""

    def compute_loss(
        self,
        comps: Components,
        model: torch.nn.Module,
        batch: dict[str, Any],
        generator: torch.Generator,
        cfg: TrainConfig,
    ) -> torch.Tensor:
        """Noise, then each sample's timestep from the run's density shifted for the batch's size, the velocity
        predicted from the packed tokens, the weighted MSE against ``eps - x0``."""
        latents, options, state = batch["latents"], cfg.family_options, run_state(comps)
        batch_size, _, height, width = latents.shape
        shift = scheduler_shift(height * width, state.scheduler_config, options.flux2_shift)
        noise, sigmas = noise_and_sigmas(latents, options, generator, shift)
        embeds = batch["prompt_embeds"]
        guidance = None
        if state.guidance_embeds:  # FLUX.2 [dev]: guidance-distilled, fed one fixed value (--flux2_train_guidance)
            guidance = torch.full((batch_size,), options.flux2_train_guidance, device=latents.device)
        pred = model(
            hidden_states=pack(noisy_latents(latents, noise, sigmas)),
            encoder_hidden_states=embeds,
            timestep=sigmas,
            guidance=guidance,
            txt_ids=text_ids(embeds.shape[1], latents.device),
            img_ids=latent_ids(height, width, latents.device),
            return_dict=False,
        )[0]
        target = velocity_target(latents, noise)
        weighting = loss_weighting(options.weighting_scheme, sigmas)
        # --masked_loss: per token of the patchified grid (the cached latents are that grid, and so is the mask)
        return weighted_or_masked_mse(unpack(pred, height, width), target, weighting, batch, cfg)
