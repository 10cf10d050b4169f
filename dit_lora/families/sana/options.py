"""Sana's own options (``--family sana``): caption handling and the flow-matching density."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.modeling.timestep_options import CaptionInstructionOptions, FlowMatchingOptions, TextPaddingOptions


@dataclass(frozen=True)
class SanaOptions(FlowMatchingOptions, CaptionInstructionOptions, TextPaddingOptions):
    """Sana's options: the shared groups it reads (the flow-matching density, the instruction prefix, the caption
    padding trim)."""

    TITLE = "sana options (--family sana)"
