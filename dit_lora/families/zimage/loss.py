"""Z-Image's loss: rectified flow on the checkpoint's shifted schedule, in Z-Image's own conventions.

``x_t = (1 - sigma) x0 + sigma eps`` with sigma drawn from the scheduler's table (``--timestep_sampling``: uniform,
as diffusers' ``train_dreambooth_lora_z_image.py`` with ``--weighting_scheme none``). ZImageTransformer2DModel
counts time the other way: it takes ``t = (1000 - timestep) / 1000 = 1 - sigma`` (1 is clean) and predicts
``x0 - eps``, the negated velocity (``ZImagePipeline.__call__`` negates the output before the Euler step). The
target is therefore ``x0 - eps`` (musubi-tuner's ``latents - noise``; diffusers negates the prediction and compares
with ``eps - x0``: the same squared error). Latents go in as a list of ``(C, 1, H, W)`` and captions as a list of
each caption's own tokens, cut with host-side lengths (no device read).
"""

from __future__ import annotations

from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.zimage.encoders import unpadded
from dit_lora.families.zimage.state import tables
from dit_lora.kit.caption_flow import HostCaptionLengths, reversed_target, reversed_time
from dit_lora.modeling.flow_matching import noisy_latents, sampling_draw
from dit_lora.modeling.masked_loss import weighted_or_masked_mse


def predict(model: torch.nn.Module, noisy: torch.Tensor, time: torch.Tensor, captions: list[torch.Tensor]):
    """The transformer's output for ``(B, C, H, W)`` latents, as ``(B, C, H, W)``."""
    out = model(list(noisy.unsqueeze(2).unbind(0)), time, captions, return_dict=False)[0]
    return torch.stack(out, dim=0).squeeze(2)


def caption_lengths(batch: dict[str, Any]) -> list[int]:
    """The host-side caption lengths of a prepared batch (a planned batch has none: every caption is full)."""
    lengths = batch.get("caption_lengths")
    if lengths is None:
        embeds = batch["prompt_embeds"]
        return [embeds.shape[1]] * embeds.shape[0]
    return list(lengths)


class ZImageLoss(HostCaptionLengths):
    """``FamilySpec.loss``: cached or encoded batches with their caption lengths read on the host, and the MSE of
    the transformer's ``x0 - eps`` prediction in fp32."""

    def compute_loss(
        self,
        comps: Components,
        model: torch.nn.Module,
        batch: dict[str, Any],
        generator: torch.Generator,
        cfg: TrainConfig,
    ) -> torch.Tensor:
        """The squared error of the transformer's ``x0 - eps`` at a drawn sigma, averaged in fp32."""
        latents = batch["latents"]
        # noise first, then one schedule entry per sample, on the device
        drawn = sampling_draw(cfg.family_options, latents, tables(comps, latents.device), generator)
        noisy = noisy_latents(latents, drawn.noise, drawn.sigmas)
        captions = unpadded(batch["prompt_embeds"], caption_lengths(batch))
        pred = predict(model, noisy, reversed_time(drawn.timesteps), captions)
        target = reversed_target(latents, drawn.noise)
        # --masked_loss: per latent pixel (the transformer patches inside)
        return weighted_or_masked_mse(pred, target, None, batch, cfg.data)
