"""SANA-Video's own options: text-to-video (``--family sanavideo``) and image-to-video (``--family sanavideo_i2v``,
which adds the conditioning image). Every group is shared: the flow-matching density and the caption instruction
with Sana, the training shift and the trained-size guard with Wan (:mod:`dit_lora.modeling.timestep_options`)."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import FamilyOptions
from dit_lora.modeling.timestep_options import (
    CaptionInstructionOptions,
    ConditioningImageOptions,
    FlowMatchingOptions,
    FlowShiftOptions,
    LogitNormalOptions,
)

#: NVlabs' SANA-Video trainer's shift of the training schedule (``scheduler.flow_shift: 3.0`` in
#: configs/sana_video_config/Sana_2000M_480px_AdamW_fsdp.yaml; its ``inference_flow_shift`` is 7.0 and the diffusers
#: checkpoint's scheduler carries the sampling shift 8.0, which is not a training value)
TRAINING_SHIFT = 3.0


@dataclass(frozen=True)
class SanaVideoOptions(
    FlowMatchingOptions, LogitNormalOptions, FlowShiftOptions, CaptionInstructionOptions, FamilyOptions
):
    """Options SANA-Video (both tasks) reads: ``--weighting_scheme`` (default logit_normal(0, 1), NVlabs'),
    ``--flow_shift`` (default :data:`TRAINING_SHIFT`) and ``--complex_human_instruction``."""

    TITLE = "sanavideo options (--family sanavideo or sanavideo_i2v)"


@dataclass(frozen=True)
class SanaVideoI2VOptions(SanaVideoOptions, ConditioningImageOptions):
    """SANA-Video image-to-video: the SANA-Video options plus the conditioning image's."""

    TITLE = "sanavideo_i2v options (--family sanavideo_i2v)"
