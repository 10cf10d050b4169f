"""Sana's own options (``--family sana``): caption handling and the flow-matching density."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import opt
from dit_lora.modeling.timestep_options import CaptionInstructionOptions, FlowMatchingOptions


@dataclass(frozen=True)
class SanaOptions(FlowMatchingOptions, CaptionInstructionOptions):
    """Options only Sana reads."""

    TITLE = "sana options (--family sana)"

    trim_text_padding: bool = opt(
        True,
        "Sana: cut the caption padding that no cached caption reaches (the cross-attention masks it in every "
        "sample) from every batch, once per run from the latent cache: the same function over fewer keys, up to "
        "float rounding. Only with --cache_latents; false keeps all --max_sequence_length tokens.",
        section="sana",
        resume="free",
    )
