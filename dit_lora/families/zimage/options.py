"""Z-Image's own options (``--family zimage``): the timestep density, a group shared with CogVideoX and Wan."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.modeling.timestep_options import TimestepSamplingOptions


@dataclass(frozen=True)
class ZImageOptions(TimestepSamplingOptions):
    """Options only Z-Image reads: ``--timestep_sampling`` (default ``uniform`` over the checkpoint's shifted
    schedule, as diffusers' ``train_dreambooth_lora_z_image.py`` with its default ``--weighting_scheme none``)."""

    TITLE = "zimage options (--family zimage)"
