"""LTX-2's own options (``--family ltx2``; ``ltx2_i2v`` adds the conditioning image): whether the clips' sound is trained with their frames, and the weight of
its part of the loss."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import NON_NEGATIVE, FamilyOptions, opt
from dit_lora.modeling.timestep_options import ConditioningImageOptions

#: the share of the audio part in the joint loss by default (Lightricks' LTX-2 trainer sums the two losses)
AUDIO_LOSS_WEIGHT = 1.0


@dataclass(frozen=True)
class LTX2Options(FamilyOptions):
    """Options LTX-2 reads: ``--audio`` and ``--audio_loss_weight``."""

    TITLE = "ltx2 options (--family ltx2 or ltx2_i2v)"

    audio: str = opt(
        "on",
        "Train each clip's own sound with its frames (`on`: the audio track decoded, resampled to the audio VAE's "
        "rate, cut to the frames' span and cached beside the video latents; a clip without a track trains its "
        "video alone, its audio part masked out of the loss) or the video alone (`off`: the audio stream gets "
        "noise it never learns from, as diffusion-pipe trains LTX-2).",
        choices=("on", "off"),
        section="audio",
        resume="fixed",
    )
    audio_loss_weight: float = opt(
        AUDIO_LOSS_WEIGHT,
        "Weight of the audio part of the joint loss (video MSE + this x the audio MSE over the steps the clip's "
        "track covers). 0 trains the video alone while still giving the model the clips' sound.",
        section="audio",
        resume="fixed",
        valid=NON_NEGATIVE,
    )


@dataclass(frozen=True)
class LTX2I2VOptions(LTX2Options, ConditioningImageOptions):
    """LTX-2 image-to-video: the LTX-2 options plus the conditioning image's."""

    TITLE = "ltx2_i2v options (--family ltx2_i2v)"
