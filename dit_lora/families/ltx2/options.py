"""LTX-2's own options (``--family ltx2``; ``ltx2_i2v`` adds the conditioning image, ``ltx2_ic`` the reference clips):
whether the clips' sound is trained with their frames, and the weight of its part of the loss."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.option import Range
from dit_lora.config.schema import NON_NEGATIVE, FamilyOptions, opt
from dit_lora.modeling.timestep_options import ConditioningImageOptions

#: the share of the audio part in the joint loss by default (Lightricks' LTX-2 trainer sums the two losses)
AUDIO_LOSS_WEIGHT = 1.0


@dataclass(frozen=True)
class LTX2AudioOptions:
    """The group every LTX-2 task's class lists: ``--audio`` and ``--audio_loss_weight`` (listed under each task's
    title)."""

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
class LTX2Options(LTX2AudioOptions, FamilyOptions):
    """LTX-2 text-to-video: the sound's options and first-frame conditioning."""

    TITLE = "ltx2 options (--family ltx2 or ltx2_ic)"

    first_frame_conditioning_p: float = opt(
        0.0,
        "The share of steps whose clips have their first frame given clean, at timestep 0 and out of the loss (the "
        "whole batch of a step, drawn from the run's seed), so that the LoRA also works when a pipeline conditions "
        "on a first frame (LTX2ImageToVideoPipeline, LTX2InContextPipeline's `conditions`). Lightricks' LTX-2 "
        "trainer uses 0.1; 0 (the default) trains text-to-video alone, as before. Image-to-video always conditions.",
        section="timesteps",
        resume="fixed",
        valid=Range(0, 1, why="a probability"),
    )


@dataclass(frozen=True)
class LTX2I2VOptions(LTX2AudioOptions, ConditioningImageOptions, FamilyOptions):
    """LTX-2 image-to-video: the sound's options plus the conditioning image's (its first frame is always given)."""

    TITLE = "ltx2_i2v options (--family ltx2_i2v)"


@dataclass(frozen=True)
class LTX2ICOptions(LTX2Options):
    """LTX-2 in-context LoRA (``--family ltx2_ic``): the LTX-2 options plus where each clip's reference clip is named,
    its downscale factor and the validation clips' reference."""

    TITLE = "ltx2_ic options (--family ltx2_ic)"

    reference_column: str | None = opt(
        None,
        "LTX-2 IC-LoRA: the metadata column naming each clip's reference clip (a path relative to the metadata "
        "file). Default: the first of `reference_path` (Lightricks' LTX-2 trainer), `in_context_videos` "
        "(DiffSynth-Studio), `reference_video`, `control_video` and `control_path` (musubi-tuner) that a row fills.",
        section="reference clips",
        resume="fixed",
    )
    reference_dir: str | None = opt(
        None,
        "LTX-2 IC-LoRA: a folder of reference clips named as the training clips (`<clip stem>.<any video or image "
        "extension>`, subfolders as under --train_data_dir), for the clips whose metadata row names none.",
        section="reference clips",
        resume="fixed",
    )
    reference_downscale_factor: int = opt(
        1,
        "LTX-2 IC-LoRA: each reference clip is decoded at its clip's size divided by this (2: half the height and "
        "width, a quarter of the reference tokens), its positions scaled back to the clip's; written into the "
        "adapter's metadata (`reference_downscale_factor`) as Lightricks' trainer writes it, and passed as "
        "LTX2InContextPipeline's `reference_downscale_factor` when sampling.",
        section="reference clips",
        resume="fixed",
        valid=Range(1, why="the reference is never larger than its clip"),
    )
    validation_reference: str | None = opt(
        None,
        "LTX-2 IC-LoRA: the reference clip of validation clips. Default: the first training clip's.",
        section="reference clips",
        resume="free",
    )
