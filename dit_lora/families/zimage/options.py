"""Z-Image's own options (``--family zimage``): the timestep density (shared with CogVideoX and Wan) and the schedule's
shift (``--flow_shift``, shared with Wan)."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import FamilyOptions
from dit_lora.modeling.timestep_options import FlowShiftOptions, LogitNormalOptions, TimestepSamplingOptions


@dataclass(frozen=True)
class ZImageOptions(TimestepSamplingOptions, LogitNormalOptions, FlowShiftOptions, FamilyOptions):
    """Options only Z-Image reads: ``--timestep_sampling`` (default ``uniform`` over the checkpoint's shifted
    schedule, as diffusers' ``train_dreambooth_lora_z_image.py`` with its default ``--weighting_scheme none``)."""

    TITLE = "zimage options (--family zimage)"
