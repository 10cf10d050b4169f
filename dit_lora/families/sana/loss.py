"""Sana's loss (rectified flow: x_t = (1 - sigma) x0 + sigma eps, target eps - x0, with the timestep density and loss
weighting of ``diffusers.training_utils`` and the flow shift read from the checkpoint's scheduler config), every
batch cut to the caption tokens the cached captions use (``--trim_text_padding``: the kit's
:class:`~dit_lora.families.diffusion.text_padding.TrimmedTextData` measures them once)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.data.text_padding import cut_text_padding
from dit_lora.families.diffusion.components import DiffusionLoss
from dit_lora.families.sana.state import run_state, tables
from dit_lora.modeling.flow_matching import (
    draw,
    loss_weighting,
    noisy_latents,
    velocity_target,
)
from dit_lora.modeling.masked_loss import weighted_or_masked_mse

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


class SanaLoss(DiffusionLoss):
    """``FamilySpec.loss``: the rectified-flow loss of one micro-batch (batches prepared by the diffusion base)."""

    def compute_loss(
        self,
        comps: Components,
        model: torch.nn.Module,
        batch: dict[str, Any],
        generator: torch.Generator,
        cfg: TrainConfig,
    ) -> torch.Tensor:
        """Noise drawn at timesteps of the run's density, the velocity predicted, the weighted MSE against it."""
        latents, options = batch["latents"], cfg.family_options
        drawn = draw(
            latents,
            tables(comps, latents.device),
            options.weighting_scheme,
            logit_mean=options.logit_mean,
            logit_std=options.logit_std,
            mode_scale=options.mode_scale,
            generator=generator,
        )
        noisy = noisy_latents(latents, drawn.noise, drawn.sigmas)
        embeds, mask = cut_text_padding(
            batch["prompt_embeds"], batch["prompt_attention_mask"], run_state(comps).text_tokens
        )
        pred = model(
            hidden_states=noisy,
            encoder_hidden_states=embeds,
            encoder_attention_mask=mask,
            timestep=drawn.timesteps,
            return_dict=False,
        )[0]
        target = velocity_target(latents, drawn.noise)
        weighting = loss_weighting(options.weighting_scheme, drawn.sigmas)
        return weighted_or_masked_mse(pred, target, weighting, batch, cfg)  # --masked_loss: per latent pixel
