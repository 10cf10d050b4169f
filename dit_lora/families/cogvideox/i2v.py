"""CogVideoX image-to-video (``cogvideox_i2v``, ``CogVideoXImageToVideoPipeline``): the components that differ from
text-to-video.

The shared implementation (loading, loss, RoPE, 1.5 padding, saving) is the text-to-video components'. Here: the
``--validation_image`` check, the cached first-frame latents, the conditioning input of the transformer (noisy
latents and the image latents concatenated on the channel axis, with ``--first_frame_noise`` /
``--noised_image_dropout``), the conditioning image of validation videos (kept in the run's state) and the card.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.families.cogvideox.adapter import CogVideoXCard
from dit_lora.families.cogvideox.encoders import CogVideoXEncoders
from dit_lora.families.cogvideox.info import CogVideoXVideo, check_latent_size
from dit_lora.families.cogvideox.loss import CogVideoXLoss
from dit_lora.families.cogvideox.model import CogVideoXModel
from dit_lora.families.cogvideox.samples import CogVideoXSamples
from dit_lora.families.cogvideox.state import run_state
from dit_lora.kit.adapter import first_frame_image
from dit_lora.kit.components import DiffusionSetup
from dit_lora.kit.conditioning import check_validation_image, kept_conditioning_image

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


class CogVideoXI2VModel(CogVideoXModel):
    """``FamilySpec.model`` of image-to-video: the text-to-video checks, and ``--validation_image`` exists."""

    def check_validation_image(self, cfg: TrainConfig) -> None:
        """Refuse a ``--validation_image`` that is not a file (unset: the first clip's first frame is taken)."""
        check_validation_image(cfg, "condition validation videos on the first training clip's first frame")


class CogVideoXI2VEncoders(CogVideoXEncoders):
    """``FamilySpec.encoders`` of image-to-video: the clip latents and the first frame's, encoded alone."""

    task = "i2v"

    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        """Adds ``"image_latents"``: the first frame encoded alone, ``(B, 1, C, h, w)``, scaled as the I2V pipeline."""
        out = super().encode_images(comps, pixel_values)
        vae = comps.encoders["vae"]
        first = pixel_values[:, :1].to(vae.device, vae.dtype).permute(0, 2, 1, 3, 4)  # (B, 3, 1, H, W)
        with torch.no_grad():
            image = vae.encode(first).latent_dist.mode()
        check_latent_size(vae, first.shape[-2:], image.shape[-2:])
        # CogVideoXImageToVideoPipeline.prepare_latents: x scaling_factor, or / it with invert_scale_latents (1.5).
        factor = vae.config.scaling_factor
        image = image / factor if getattr(vae.config, "invert_scale_latents", False) else image * factor
        out["image_latents"] = image.permute(0, 2, 1, 3, 4).float()
        return out


class CogVideoXI2VLoss(CogVideoXLoss):
    """``FamilySpec.loss`` of image-to-video: the image latents beside the noisy ones, augmented per sample."""

    def model_input(
        self, noisy: torch.Tensor, batch: dict[str, Any], generator: torch.Generator, cfg: TrainConfig
    ) -> torch.Tensor:
        """``[noisy latents | image latents at frame 0, zeros after]`` on the channel axis (``dim=2``)."""
        image = batch["image_latents"].to(noisy.dtype)
        bsz, device = image.shape[0], image.device
        if cfg.family_options.first_frame_noise:
            sigma = torch.exp(torch.randn(bsz, generator=generator, device=device) * 0.5 - 3.0).to(image.dtype)
            noise = torch.randn(image.shape, generator=generator, device=device, dtype=image.dtype)
            image = image + sigma.view(-1, 1, 1, 1, 1) * noise
        if cfg.family_options.noised_image_dropout > 0:
            keep = torch.rand(bsz, generator=generator, device=device) >= cfg.family_options.noised_image_dropout
            image = image * keep.view(-1, 1, 1, 1, 1).to(image.dtype)
        zeros = image.new_zeros((bsz, noisy.shape[1] - image.shape[1], *image.shape[2:]))
        return torch.cat([noisy, torch.cat([image, zeros], dim=1)], dim=2)


class CogVideoXI2VSetup(DiffusionSetup):
    """``FamilySpec.setup`` of image-to-video: the validation videos' conditioning image, taken once the samples are
    screened and kept in the run's :class:`~.state.CogVideoXRun`."""

    def __init__(self, video: CogVideoXVideo) -> None:
        self.video = video

    def inspect_samples(self, comps: Components, cfg: TrainConfig, samples: list) -> None:
        """``--validation_image``, else the first clip's first frame, at the first bucket's size."""
        kept_conditioning_image(self.video, cfg, run_state(comps), samples)


class CogVideoXI2VSamples(CogVideoXSamples):
    """``FamilySpec.samples`` of image-to-video: every video conditioned on the run's image."""

    def call_kwargs(
        self, cfg: TrainConfig, generator: torch.Generator, num_videos: int, comps: Components | None = None
    ) -> dict[str, Any]:
        """The text-to-video arguments and the run's conditioning image (else ``--validation_image``) per video."""
        image = kept_conditioning_image(self.video, cfg, run_state(comps) if comps is not None else None)
        return {**super().call_kwargs(cfg, generator, num_videos, comps), "image": [image] * num_videos}


class CogVideoXI2VCard(CogVideoXCard):
    """``FamilySpec.card`` of image-to-video: the snippet loads the first frame; the conditioning rows."""

    def snippet_image(self) -> tuple[str, str, str]:
        """The kit's first frame (:func:`~dit_lora.kit.adapter.first_frame_image`): the one the run wrote beside the
        adapter, loaded with ``load_image``, passed as ``image=``."""
        return first_frame_image()

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The text-to-video rows and the first frame's noise and dropout."""
        return {
            **super().card_settings(cfg),
            "first_frame_noise": cfg.family_options.first_frame_noise,
            "noised_image_dropout": cfg.family_options.noised_image_dropout,
        }
