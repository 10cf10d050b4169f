"""Ideogram 4's own options (``--family ideogram4``): none beyond the shared flow-matching and logit-normal groups,
whose defaults the family's :class:`~dit_lora.families.ideogram4.spec.Ideogram4Defaults` sets as diffusers' script
does."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import FamilyOptions
from dit_lora.modeling.timestep_options import FlowMatchingOptions, LogitNormalOptions


@dataclass(frozen=True)
class Ideogram4Options(FlowMatchingOptions, LogitNormalOptions, FamilyOptions):
    """Options Ideogram 4 reads: ``--weighting_scheme``, ``--logit_mean`` (the schedule's mean at 512 x 512 px, moved
    by half the log of the image's pixel ratio, as ``Ideogram4Pipeline`` samples), ``--logit_std`` (1.5 by default,
    the pipeline's), ``--mode_scale``."""

    TITLE = "ideogram4 options (--family ideogram4)"
