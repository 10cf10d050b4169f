"""Sana's loss: the kit's rectified flow over cached latents and masked captions
(:class:`~dit_lora.kit.caption_flow.MaskedCaptionFlowLoss`: x_t = (1 - sigma) x0 + sigma eps, target
eps - x0, the timestep density and loss weighting of ``diffusers.training_utils``, the flow shift read from the
checkpoint's scheduler config, every batch cut to the caption tokens the cached captions use)."""

from __future__ import annotations

import torch

from dit_lora.families.sana.state import run_state, tables
from dit_lora.kit.caption_flow import MaskedCaptionFlowLoss


class SanaLoss(MaskedCaptionFlowLoss):
    """``FamilySpec.loss``: the rectified-flow loss of one micro-batch (batches prepared by the diffusion base)."""

    run_state, tables = staticmethod(run_state), staticmethod(tables)

    def predict(
        self, model: torch.nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, embeds: torch.Tensor, mask
    ) -> torch.Tensor:
        """SanaTransformer2DModel's velocity at the scheduler's timesteps."""
        return model(
            hidden_states=noisy,
            encoder_hidden_states=embeds,
            encoder_attention_mask=mask,
            timestep=timesteps,
            return_dict=False,
        )[0]
