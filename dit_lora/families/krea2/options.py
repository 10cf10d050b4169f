"""Krea 2's own options (``--family krea2``): the timestep shift."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import POSITIVE, FamilyOptions, opt
from dit_lora.modeling.timestep_options import FlowMatchingOptions, LogitNormalOptions


@dataclass(frozen=True)
class Krea2Options(FlowMatchingOptions, LogitNormalOptions, FamilyOptions):
    """Options only Krea 2 reads (``--weighting_scheme``, ``--logit_mean``/``--logit_std``, ``--mode_scale`` come from
    the shared flow-matching and logit-normal groups)."""

    TITLE = "krea2 options (--family krea2)"

    krea2_shift: float | None = opt(
        None,
        "Krea 2: the flow shift applied to every drawn timestep (sigma -> s*sigma / (1 + (s-1)*sigma)). Default: the "
        "shift Krea2Pipeline samples the batch's size with, from the checkpoint's scheduler config (s = exp(mu), mu "
        "linear from base_shift 0.5 at 256 image tokens to max_shift 1.15 at 6400).",
        section="krea2",
        resume="fixed",
        valid=POSITIVE,
    )
