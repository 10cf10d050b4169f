"""CogVideoX's own options: text-to-video (``--family cogvideox``) and image-to-video (``--family cogvideox_i2v``,
which adds the conditioning-image options).
"""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import POSITIVE, PROBABILITY, FamilyOptions, opt
from dit_lora.modeling.timestep_options import (
    ConditioningImageOptions,
    LogitNormalOptions,
    TimestepSamplingOptions,
    TrainedSizeOptions,
)


@dataclass(frozen=True)
class CogVideoXOptions(TimestepSamplingOptions, LogitNormalOptions, TrainedSizeOptions, FamilyOptions):
    """Options only CogVideoX (both tasks) reads."""

    TITLE = "cogvideox options (--family cogvideox or cogvideox_i2v)"

    demo_cogvideox_version: str = opt(
        "1.0-5b",
        "CogVideoX demo: which architecture the tiny model copies (2B: sin-cos positions; 5B: RoPE; "
        "1.5: RoPE, patch_size_t 2, ofs embedding).",
        choices=("1.0-2b", "1.0-5b", "1.5"),
        section="cogvideox",
        resume="fixed",
    )
    enable_slicing: bool = opt(
        True, "Encode videos one sample at a time inside the VAE (VAE slicing).", section="cogvideox", resume="free"
    )
    enable_tiling: bool = opt(
        True,
        "Encode and decode videos in overlapping spatial tiles (VAE tiling): less memory at 480x720 and up.",
        section="cogvideox",
        resume="free",
    )
    loss_weight_cap: float | None = opt(
        None,
        "CogVideoX: clamp the per-sample loss weight 1/(1 - alphas_cumprod[t]) to this value (e.g. 20). The "
        "reference weight is ~1177 (5B, 1.5) or ~393 (2B) at t=0. Off when unset (parity with the references).",
        section="cogvideox",
        resume="fixed",
        valid=POSITIVE,
    )


@dataclass(frozen=True)
class CogVideoXI2VOptions(CogVideoXOptions, ConditioningImageOptions):
    """CogVideoX image-to-video: the CogVideoX options plus the conditioning image's."""

    TITLE = "cogvideox_i2v options (--family cogvideox_i2v)"

    first_frame_noise: bool = opt(
        True,
        "CogVideoX image-to-video: add Gaussian noise with sigma = exp(N(-3, 0.5)) per sample to the conditioning "
        "image latents at every step (the THUDM trainer's augmentation).",
        section="cogvideox",
        resume="fixed",
    )
    noised_image_dropout: float = opt(
        0.0,
        "CogVideoX image-to-video: probability of zeroing a sample's conditioning image latents.",
        section="cogvideox",
        resume="fixed",
        valid=PROBABILITY,
    )
