"""Ideogram 4's loss, as diffusers' ``train_dreambooth_lora_ideogram4.py`` computes it: sigma drawn from the run's
density (``--weighting_scheme logit_normal`` by default, ``--logit_std`` 1.5) with its mean moved by half the log of
the image's pixels over 512 x 512 (``Ideogram4Pipeline``'s resolution-aware schedule), used as it is (no scheduler
shift); ``x_t = (1 - sigma) x0 + sigma eps``; the transformer counts time the other way (``t = 1 - sigma``, 1 is
clean) and predicts ``x0 - eps``.

Its input is one packed sequence a sample, ``[left padding][caption][image]``: the image's 2 x 2 patches (the cached
``(B, 128, h, w)`` latents, one token a cell) behind zero latents at the caption's places, the caption's features
behind zero features at the image's, and ``Ideogram4Pipeline._prepare_ids``' position, segment and role ids, laid
out by each caption's token count (host ints: the batch is padded to its longest caption, not to the pipeline's
2,048). The transformer runs without autocast, its inputs in the run's weight dtype: diffusers' README warns that
autocast corrupts Ideogram 4's predictions (its ``--disable_training_autocast``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.ideogram4.encoders import LENGTHS_KEY
from dit_lora.kit.caption_flow import HostCaptionLengths, reversed_target
from dit_lora.modeling.flow_matching import density_draws, loss_weighting, noisy_latents
from dit_lora.modeling.masked_loss import weighted_or_masked_mse

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: pixels per latent cell: the VAE's 8x times the 2 x 2 patch
STRIDE = 16


def resolution_mean(base: float, height: int, width: int) -> float:
    """``Ideogram4Pipeline``'s ``_resolution_aware_mu``: ``base + 0.5 log(H W / 512^2)`` for an image of ``height``
    x ``width`` pixels."""
    return base + 0.5 * math.log(height * width / (512 * 512))


def left_padded(features: torch.Tensor, lengths: list[int], text: int) -> torch.Tensor:
    """Each caption's own tokens (``(B, longest, F)``, first) moved to the end of ``text`` places, zero before: the
    pipeline's left padding."""
    out = features.new_zeros(features.shape[0], text, features.shape[-1])
    for row, n in enumerate(lengths):
        out[row, text - n :] = features[row, :n]
    return out


def layout_ids(lengths: list[int], height: int, width: int, text: int, device) -> tuple[torch.Tensor, ...]:
    """``Ideogram4Pipeline._prepare_ids`` built on ``device`` (the pipeline builds them on the host and copies them,
    a wait for the device every step): ``position_ids`` ``(B, S, 3)`` (a caption's tokens ``(i, i, i)``, the image's
    ``(0, h, w)`` past ``IMAGE_POSITION_OFFSET``), ``segment_ids`` (1 for the caption and image, -1 for padding) and
    ``indicator`` (text 3, image 2, padding 0), ``S = text + height * width``."""
    from diffusers.models.transformers import transformer_ideogram4 as ideogram4  # slow import: only in a step

    size = text + height * width
    rows = torch.arange(height, device=device).repeat_interleave(width)
    cols = torch.arange(width, device=device).repeat(height)
    image = torch.stack([torch.zeros_like(rows), rows, cols], dim=1) + ideogram4.IMAGE_POSITION_OFFSET
    positions = torch.zeros(len(lengths), size, 3, dtype=torch.long, device=device)
    segments = torch.full((len(lengths), size), ideogram4.SEQUENCE_PADDING_INDICATOR, dtype=torch.long, device=device)
    indicator = torch.zeros(len(lengths), size, dtype=torch.long, device=device)
    for row, n in enumerate(lengths):
        positions[row, text - n : text] = torch.arange(n, device=device)[:, None].expand(n, 3)
        positions[row, text:] = image
        indicator[row, text - n : text] = ideogram4.LLM_TOKEN_INDICATOR
        indicator[row, text:] = ideogram4.OUTPUT_IMAGE_INDICATOR
        segments[row, text - n :] = 1
    return positions, segments, indicator


def sequence(latents: torch.Tensor, features: torch.Tensor, lengths: list[int]) -> dict[str, torch.Tensor]:
    """The transformer's keywords for ``(B, C, h, w)`` latents and the captions: the packed hidden states and text
    features, and the pipeline's ``position_ids``, ``segment_ids`` and ``indicator`` (:func:`layout_ids`)."""
    batch, channels, height, width = latents.shape
    text = features.shape[1]
    tokens = latents.flatten(2).transpose(1, 2)  # (B, h * w, C), row-major as the pipeline's image positions
    position_ids, segment_ids, indicator = layout_ids(lengths, height, width, text, latents.device)
    return {
        "hidden_states": torch.cat([tokens.new_zeros(batch, text, channels), tokens], dim=1),
        "encoder_hidden_states": torch.cat(
            [left_padded(features, lengths, text), features.new_zeros(batch, height * width, features.shape[-1])], 1
        ),
        "position_ids": position_ids,
        "segment_ids": segment_ids,
        "indicator": indicator,
    }


def predict(model, noisy: torch.Tensor, sigmas: torch.Tensor, batch: dict[str, Any], dtype: torch.dtype):
    """The transformer's ``x0 - eps`` for ``(B, C, h, w)`` latents at ``sigmas``, back on their grid; autocast off,
    the inputs in ``dtype``."""
    features = batch["prompt_embeds"]
    inputs = sequence(noisy, features, batch["caption_lengths"])
    with torch.autocast(noisy.device.type, enabled=False):
        out = model(
            hidden_states=inputs.pop("hidden_states").to(dtype),
            encoder_hidden_states=inputs.pop("encoder_hidden_states").to(dtype),
            timestep=(1.0 - sigmas).to(dtype),
            **inputs,
            return_dict=False,
        )[0]
    image = out[:, features.shape[1] :]
    return image.transpose(1, 2).reshape(noisy.shape)


class Ideogram4Loss(HostCaptionLengths):
    """``FamilySpec.loss``: cached or encoded batches with their caption lengths read on the host, the weighted MSE
    of the transformer's ``x0 - eps`` in fp32."""

    lengths_key = LENGTHS_KEY

    def compute_loss(
        self,
        comps: Components,
        model: torch.nn.Module,
        batch: dict[str, Any],
        generator: torch.Generator,
        cfg: TrainConfig,
    ) -> torch.Tensor:
        """Noise, then each sample's sigma from the run's density at the batch's resolution-aware mean, the
        prediction, the weighted MSE against ``x0 - eps``."""
        latents, options = batch["latents"], cfg.family_options
        noise = torch.randn(latents.shape, generator=generator, device=latents.device, dtype=latents.dtype)
        mean = resolution_mean(options.logit_mean, latents.shape[-2] * STRIDE, latents.shape[-1] * STRIDE)
        sigmas = density_draws(options, latents.shape[0], latents.device, generator, logit_mean=mean)
        sigmas = sigmas.to(latents.dtype)
        pred = predict(model, noisy_latents(latents, noise, sigmas), sigmas, batch, cfg.weight_dtype)
        weighting = loss_weighting(options.weighting_scheme, sigmas)
        # --masked_loss: per cell of the latent grid (the mask is cached at the latents' size)
        return weighted_or_masked_mse(pred, reversed_target(latents, noise), weighting, batch, cfg.data)
