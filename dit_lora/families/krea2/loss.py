"""Krea 2's loss: the kit's rectified flow (:mod:`~dit_lora.kit.guided_flow`, as diffusers'
``train_dreambooth_lora_krea2.py``: ``x_t = (1 - sigma) x0 + sigma eps``, target ``eps - x0``, the transformer given
``timestep = sigma``; Krea 2 has no guidance embedding, so none is fed) on the latents packed 2x2 into tokens as
``Krea2Pipeline._pack_latents`` packs them, with the pipeline's position ids (zeros for the caption, ``(0, h, w)``
for the image) and the caption's boolean mask. The shift is the one Krea2Pipeline samples the batch's size with
(its ``mu`` from the image's token count; diffusers' script draws unshifted sigmas), ``--krea2_shift`` fixes it."""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.families.krea2.state import Krea2Run
from dit_lora.kit.components import DiffusionLoss
from dit_lora.kit.guided_flow import GuidedFlowLoss
from dit_lora.kit.packed import latent_ids, pack, unpack


def position_ids(text_tokens: int, height: int, width: int, device) -> torch.Tensor:
    """``Krea2Pipeline.prepare_position_ids``: ``(text + height * width, 3)``, zeros for the caption's tokens, then
    ``(0, h, w)`` for the image's (fp32, built on ``device``)."""
    text = torch.zeros(text_tokens, 3, device=device)
    return torch.cat([text, latent_ids(height, width, device, torch.float32)])


class Krea2Loss(GuidedFlowLoss, DiffusionLoss):
    """``FamilySpec.loss``: the kit's flow loss through Krea 2's transformer."""

    state, shift_option, guidance_option = Krea2Run, "krea2_shift", ""

    def image_tokens(self, latents: torch.Tensor) -> int:
        """One token per 2x2 patch."""
        return (latents.shape[-2] // 2) * (latents.shape[-1] // 2)

    def predict(self, model, noisy: torch.Tensor, sigmas: torch.Tensor, guidance, batch: dict[str, Any]):
        """The packed tokens, the stacked caption states and their mask, the position ids; the prediction
        unpacked."""
        embeds, (height, width) = batch["prompt_embeds"], noisy.shape[-2:]
        pred = model(
            hidden_states=pack(noisy),
            encoder_hidden_states=embeds,
            timestep=sigmas,
            position_ids=position_ids(embeds.shape[1], height // 2, width // 2, noisy.device),
            encoder_attention_mask=batch["prompt_embeds_mask"].to(torch.bool),
            return_dict=False,
        )[0]
        return unpack(pred, height, width)
