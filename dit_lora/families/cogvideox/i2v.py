"""CogVideoX image-to-video (``cogvideox_i2v``, ``CogVideoXImageToVideoPipeline``): what differs from text-to-video.

The shared implementation (loading, loss, RoPE, 1.5 padding, saving) is :mod:`.cogvideox`. Here: the
cached first-frame latents, the conditioning input of the transformer (noisy latents and the image
latents concatenated on the channel axis, with ``--first_frame_noise`` / ``--noised_image_dropout``),
and the conditioning image of validation videos.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.contract.family import Components
from dit_lora.families.diffusion import run_conditioning_image
from dit_lora.families.cogvideox.spec import CogVideoXFamily
from dit_lora.families.cogvideox.info import check_latent_size


class CogVideoXI2VFamily(CogVideoXFamily):
    """CogVideoX 1.0 5B and 1.5 image-to-video: the first frame conditions the video."""

    name = "cogvideox_i2v"
    task = "i2v"
    card_tags = ("image-to-video", "diffusers", "cogvideox", "diffusers-training")
    pipeline_class_name = "CogVideoXImageToVideoPipeline"

    def _check_validation_image(self, cfg: TrainConfig) -> None:
        if cfg.family_options.validation_image and not Path(cfg.family_options.validation_image).is_file():
            raise UserError(f"--validation_image `{cfg.family_options.validation_image}` does not exist. Give an image "
                            "file, or "
                            "leave it unset to condition validation videos on the first training clip's first frame.")

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

    def model_input(self, noisy, batch, generator, cfg):
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

    def inspect_samples(self, comps: Components, cfg: TrainConfig, samples: list) -> None:
        """The conditioning image of validation videos (--validation_image or the first clip's first frame), kept in
        ``comps.extras["validation_image"]``."""
        run_conditioning_image(self, cfg, comps, samples)

    def _image(self, cfg: TrainConfig, comps: Components | None):
        """The run's conditioning image (:meth:`inspect_samples`), else ``--validation_image``."""
        return run_conditioning_image(self, cfg, comps)

    def _call_kwargs(self, cfg, generator, num_videos, comps=None):
        return {**super()._call_kwargs(cfg, generator, num_videos, comps),
                "image": [self._image(cfg, comps)] * num_videos}

    def _snippet_image(self, cfg: TrainConfig) -> tuple[str, str, str]:
        source = cfg.family_options.validation_image or "first_frame.png"
        return (", load_image",
                f"image = load_image({json.dumps(source)})  # the first frame to animate\n",
                "\n    image=image,")

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        return {**super().card_settings(cfg), "first_frame_noise": cfg.family_options.first_frame_noise,
                "noised_image_dropout": cfg.family_options.noised_image_dropout}
