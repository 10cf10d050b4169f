"""DiT's loss: epsilon-prediction DDPM as DiT trains it (t uniform, the checkpoint's betas, class labels dropped to
the null class for guidance on the run's generator, MSE on the epsilon half of a learned-sigma output)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.dit.state import run_state
from dit_lora.kit.components import DiffusionLoss, ddpm_noised
from dit_lora.modeling.masked_loss import weighted_or_masked_mse

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


class DiTLoss(DiffusionLoss):
    """``FamilySpec.loss``: the DDPM noise-prediction loss of one micro-batch (batches prepared by the base)."""

    def compute_loss(
        self,
        comps: Components,
        model: torch.nn.Module,
        batch: dict[str, Any],
        generator: torch.Generator,
        cfg: TrainConfig,
    ) -> torch.Tensor:
        """Noise at uniform timesteps, labels dropped to the null class, the MSE of the predicted noise."""
        state, latents = run_state(comps), batch["latents"]
        noise, timesteps, noisy = ddpm_noised(comps.scheduler, latents, generator)
        labels = batch["class_labels"].to(latents.device).long()
        drop = torch.rand(latents.shape[0], generator=generator, device=latents.device) < state.class_dropout_prob
        labels = torch.where(drop, torch.full_like(labels, state.null_id()), labels)
        pred = state.epsilon(model(noisy, timestep=timesteps, class_labels=labels, return_dict=False)[0])
        # --masked_loss: the epsilon MSE per latent pixel (no VLB term here)
        return weighted_or_masked_mse(pred, noise, None, batch, cfg.data)
