"""The diffusers family kit's latent encodings: pixels through a family's VAE into the latents its cache keeps, in
fp32 and deterministic (the posterior's mode), so that the same data always caches the same latents.

:func:`model_identity` is what names the model in the cache's identity.

A family states only what differs: which encoding its pipeline uses (a shifted and scaled image latent, a clip
latent normalised by the VAE's per-channel statistics) and where its statistics are kept.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import torch

from dit_lora.modelfiles.pipeline_files import is_local, model_stamp

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def scaled_latents(vae, pixel_values: torch.Tensor) -> torch.Tensor:
    """``(B, 3, H, W)`` in [-1, 1] through a VAE kept in fp32 (an ``AutoencoderKL``): the posterior's mode, then
    ``(z - shift_factor) * scaling_factor`` (no shift for a VAE without one), as the pipelines undo before
    decoding."""
    with torch.no_grad():
        latents = vae.encode(pixel_values.to(vae.device, vae.dtype)).latent_dist.mode()
    shift = getattr(vae.config, "shift_factor", None) or 0.0
    return ((latents.float() - float(shift)) * float(vae.config.scaling_factor)).float()


def clip_statistics(vae) -> tuple[torch.Tensor, torch.Tensor]:
    """A clip VAE's per-channel ``(latents_mean, latents_std)`` from its config, ``(1, C, 1, 1, 1)`` each in fp32
    (shaped to broadcast over ``(B, C, F', h, w)`` latents): what :func:`normalised_clip_latents` takes."""
    mean = torch.tensor(vae.config.latents_mean, dtype=torch.float32).view(1, -1, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std, dtype=torch.float32).view(1, -1, 1, 1, 1)
    return mean, std


def normalised_clip_latents(
    vae, pixel_values: torch.Tensor, mean: torch.Tensor, std: torch.Tensor
) -> dict[str, torch.Tensor]:
    """``(B, F, 3, H, W)`` in [-1, 1] -> ``{"latents": (B, C, F', h, w)}``: the posterior's mode (the pipelines'
    ``sample_mode="argmax"``) in fp32, ``(z - mean) / std`` as the video pipelines' ``prepare_latents`` normalise
    (``mean``, ``std``: the VAE's per-channel statistics, shaped to broadcast)."""
    video = pixel_values.to(vae.device, vae.dtype).permute(0, 2, 1, 3, 4)  # (B, 3, F, H, W)
    with torch.no_grad():
        latents = vae.encode(video).latent_dist.mode().float()
    return {"latents": (latents - mean.to(latents.device)) / std.to(latents.device)}


def normalised_image_latents(vae, pixel_values: torch.Tensor) -> torch.Tensor:
    """``(B, 3, H, W)`` in [-1, 1] through a clip VAE as one-frame clips (the Qwen-Image VAE of Qwen-Image and Krea 2)
    -> ``(B, C, h, w)``: :func:`normalised_clip_latents` of the frame, ``(z - mean) / std`` by the VAE's statistics."""
    latents = normalised_clip_latents(vae, pixel_values[:, None], *clip_statistics(vae))["latents"]
    return latents[:, :, 0]


def model_identity(
    cfg: TrainConfig, stamp_key: str = "model_stamp", stamped: tuple[str, ...] = ("vae", "text_encoder")
) -> dict:
    """What names the model in a cache's identity: the model (absolute when local), the stamp of its ``stamped``
    folders under ``stamp_key``, its revision and variant (a family adds its own family name and settings)."""
    path = cfg.model.path
    return {
        "model": os.path.abspath(path) if is_local(path) else path,
        stamp_key: model_stamp(cfg.model, stamped),
        "revision": cfg.model.revision,
        "variant": cfg.model.variant,
    }
