"""FLUX.1's loss: rectified flow on the packed latents, the timesteps drawn from the run's density and shifted per
batch by the checkpoint's dynamic shift, the guidance embedding of FLUX.1 [dev] fed one fixed value.

As diffusers' ``train_dreambooth_lora_flux.py``: ``x_t = (1 - sigma) x0 + sigma eps`` on the VAE's shifted and scaled
latents, packed 2x2 into tokens ``(B, H/2*W/2, 4C)`` (``FluxPipeline._pack_latents``) with their ``(0, h, w)`` position
ids and the caption's zero ids, the transformer given ``timestep = sigma`` (it multiplies by 1000 itself), CLIP's
pooled embedding and the guidance value, the target ``eps - x0``, the per-sample MSE weighted by
``compute_loss_weighting_for_sd3``. The density: ``u`` from ``compute_density_for_timestep_sampling`` (uniform by
default, as diffusers' example), then ``sigma = s u / (1 + (s - 1) u)`` with ``s`` the scheduler's shift at the
batch's token count (``exp(mu)`` on the config's line from ``base_shift`` to ``max_shift``: the shift
``FluxPipeline`` samples that size with; ``--flux_shift`` fixes it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionLoss
from dit_lora.families.diffusion.packed import latent_ids, pack, unpack
from dit_lora.families.flux.state import run_state
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


class FluxLoss(DiffusionLoss):
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
        shift = scheduler_shift((height // 2) * (width // 2), state.scheduler_config, options.flux_shift)
        noise, sigmas = noise_and_sigmas(latents, options, generator, shift)
        embeds = batch["prompt_embeds"]
        guidance = None
        if state.guidance_embeds:  # FLUX.1 [dev]: guidance-distilled, fed one fixed value (--flux_train_guidance)
            guidance = torch.full((batch_size,), options.flux_train_guidance, device=latents.device)
        pred = model(
            hidden_states=pack(noisy_latents(latents, noise, sigmas)),
            encoder_hidden_states=embeds,
            pooled_projections=batch["pooled_prompt_embeds"],
            timestep=sigmas,
            guidance=guidance,
            txt_ids=torch.zeros(embeds.shape[1], 3, device=latents.device, dtype=embeds.dtype),
            img_ids=latent_ids(height // 2, width // 2, latents.device, embeds.dtype),
            return_dict=False,
        )[0]
        weighting = loss_weighting(options.weighting_scheme, sigmas)
        # --masked_loss: per pixel of the latent grid (the mask is cached at the latents' size)
        return weighted_or_masked_mse(
            unpack(pred, height, width), velocity_target(latents, noise), weighting, batch, cfg
        )
