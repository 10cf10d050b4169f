"""FLUX.1's loss: the kit's guided rectified flow (:mod:`~dit_lora.kit.guided_flow`, as diffusers'
``train_dreambooth_lora_flux.py`` with the pipeline's dynamic shift) on the latents packed 2x2 into tokens
``(B, H/2*W/2, 4C)`` (``FluxPipeline._pack_latents``) with their ``(0, h, w)`` position ids and the caption's zero
ids, CLIP's pooled embedding beside T5's; ``--flux_shift`` fixes the shift, ``--flux_train_guidance`` is the
guidance value; the timestep density is the shared ``--weighting_scheme`` (default ``logit_normal``; diffusers'
example uses ``none``, uniform)."""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.families.flux.state import FluxRun
from dit_lora.kit.components import DiffusionLoss
from dit_lora.kit.guided_flow import GuidedFlowLoss
from dit_lora.kit.packed import latent_ids, pack, unpack


class FluxLoss(GuidedFlowLoss, DiffusionLoss):
    """``FamilySpec.loss``: the kit's guided flow loss through FLUX.1's transformer."""

    state, shift_option, guidance_option = FluxRun, "flux_shift", "flux_train_guidance"

    def image_tokens(self, latents: torch.Tensor) -> int:
        """One token per 2x2 patch."""
        return (latents.shape[-2] // 2) * (latents.shape[-1] // 2)

    def image_sequence(
        self, noisy: torch.Tensor, batch: dict[str, Any], dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The transformer's image tokens and their ids: the noisy latents packed (Kontext appends its control's)."""
        height, width = noisy.shape[-2:]
        return pack(noisy), latent_ids(height // 2, width // 2, noisy.device, dtype)

    def predict(self, model, noisy: torch.Tensor, sigmas: torch.Tensor, guidance, batch: dict[str, Any]):
        """The image tokens, T5's embeddings and CLIP's pooled one, the ids; the target's tokens of the prediction
        unpacked."""
        embeds, (height, width) = batch["prompt_embeds"], noisy.shape[-2:]
        hidden, ids = self.image_sequence(noisy, batch, embeds.dtype)
        pred = model(
            hidden_states=hidden,
            encoder_hidden_states=embeds,
            pooled_projections=batch["pooled_prompt_embeds"],
            timestep=sigmas,
            guidance=guidance,
            txt_ids=torch.zeros(embeds.shape[1], 3, device=noisy.device, dtype=embeds.dtype),
            img_ids=ids,
            return_dict=False,
        )[0]
        return unpack(pred[:, : self.image_tokens(noisy)], height, width)
