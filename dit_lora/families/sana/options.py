"""Sana's own options (``--family sana``): caption handling and the flow-matching density."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import FamilyOptions
from dit_lora.modeling.timestep_options import (
    CaptionInstructionOptions,
    FlowMatchingOptions,
    LogitNormalOptions,
    TextPaddingOptions,
)


@dataclass(frozen=True)
class SanaOptions(
    FlowMatchingOptions, LogitNormalOptions, CaptionInstructionOptions, TextPaddingOptions, FamilyOptions
):
    """Sana's options: the shared groups it reads (the flow-matching density, the instruction prefix, the caption
    padding trim)."""

    TITLE = "sana options (--family sana)"
