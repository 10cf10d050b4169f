"""FLUX.2's loss: the kit's guided rectified flow (:mod:`~dit_lora.kit.guided_flow`, as diffusers'
``train_dreambooth_lora_flux2.py`` / ``_klein.py`` and musubi-tuner's ``flux_2_train_network.py``) on the patchified,
normalised latents as tokens ``(B, H*W, C)`` with their ``(t, h, w, l)`` position ids; logit-normal by default (as
musubi-tuner's ``flux2_shift``); ``--flux2_shift`` fixes the shift, ``--flux2_train_guidance`` is the value FLUX.2
[dev]'s guidance embedding gets.
"""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.families.flux2.state import Flux2Run
from dit_lora.kit.components import DiffusionLoss
from dit_lora.kit.guided_flow import GuidedFlowLoss


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


class Flux2Loss(GuidedFlowLoss, DiffusionLoss):
    """``FamilySpec.loss``: the kit's guided flow loss through FLUX.2's transformer."""

    state, shift_option, guidance_option = Flux2Run, "flux2_shift", "flux2_train_guidance"

    def image_tokens(self, latents: torch.Tensor) -> int:
        """One token per cell of the patchified grid."""
        return latents.shape[-2] * latents.shape[-1]

    def predict(self, model, noisy: torch.Tensor, sigmas: torch.Tensor, guidance, batch: dict[str, Any]):
        """The packed tokens, the stacked text embeddings, the ids; the prediction back on the grid."""
        embeds, (height, width) = batch["prompt_embeds"], noisy.shape[-2:]
        pred = model(
            hidden_states=pack(noisy),
            encoder_hidden_states=embeds,
            timestep=sigmas,
            guidance=guidance,
            txt_ids=text_ids(embeds.shape[1], noisy.device),
            img_ids=latent_ids(height, width, noisy.device),
            return_dict=False,
        )[0]
        return unpack(pred, height, width)
