"""HunyuanVideo 1.5's own options: text-to-video (``--family hunyuanvideo15``) and image-to-video
(``--family hunyuanvideo15_i2v``, which adds the conditioning image). Every group is shared with the other flow
families (:mod:`dit_lora.modeling.timestep_options`)."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import FamilyOptions
from dit_lora.modeling.timestep_options import (
    ConditioningImageOptions,
    FlowMatchingOptions,
    FlowShiftOptions,
    LogitNormalOptions,
)


@dataclass(frozen=True)
class HunyuanVideo15Options(FlowMatchingOptions, LogitNormalOptions, FlowShiftOptions, FamilyOptions):
    """Options HunyuanVideo 1.5 (both tasks) reads: ``--weighting_scheme`` and ``--flow_shift`` (unset: the
    checkpoint scheduler's shift, 5 at 480p)."""

    TITLE = "hunyuanvideo15 options (--family hunyuanvideo15 or hunyuanvideo15_i2v)"


@dataclass(frozen=True)
class HunyuanVideo15I2VOptions(HunyuanVideo15Options, ConditioningImageOptions):
    """HunyuanVideo 1.5 image-to-video: the text-to-video options plus the conditioning image's."""

    TITLE = "hunyuanvideo15_i2v options (--family hunyuanvideo15_i2v)"
