"""Chroma's own options (``--family chroma``): the timestep shift."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import POSITIVE, FamilyOptions, opt
from dit_lora.modeling.timestep_options import FlowMatchingOptions, LogitNormalOptions, TextPaddingOptions


@dataclass(frozen=True)
class ChromaOptions(FlowMatchingOptions, LogitNormalOptions, TextPaddingOptions, FamilyOptions):
    """Options only Chroma reads (``--weighting_scheme``, ``--logit_mean``/``--logit_std``, ``--mode_scale`` come from
    the shared flow-matching and logit-normal groups, ``--trim_text_padding`` from the caption padding group)."""

    TITLE = "chroma options (--family chroma)"

    chroma_shift: float | None = opt(
        None,
        "Chroma: the flow shift applied to every drawn timestep (sigma -> s*sigma / (1 + (s-1)*sigma)). Default: the "
        "shift ChromaPipeline samples the batch's size with, from the checkpoint's scheduler config (with dynamic "
        "shifting, s = exp(mu), mu linear from base_shift at base_image_seq_len to max_shift at max_image_seq_len; "
        "else its static shift).",
        section="chroma",
        resume="fixed",
        valid=POSITIVE,
    )
