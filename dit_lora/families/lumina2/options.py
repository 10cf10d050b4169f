"""Lumina 2's own options (``--family lumina2``): the system prompt, the flow-matching density and the caption
padding trim."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.config.schema import FamilyOptions, opt
from dit_lora.modeling.timestep_options import FlowMatchingOptions, LogitNormalOptions, TextPaddingOptions


@dataclass(frozen=True)
class Lumina2Options(FlowMatchingOptions, LogitNormalOptions, TextPaddingOptions, FamilyOptions):
    """Options only Lumina 2 reads (``--weighting_scheme``, ``--logit_mean``/``--logit_std``, ``--mode_scale`` come
    from the shared flow-matching and logit-normal groups, ``--trim_text_padding`` from the caption padding group)."""

    TITLE = "lumina2 options (--family lumina2)"

    system_prompt: str | None = opt(
        None,
        "Lumina 2: the system prompt Gemma-2 reads before every caption (Lumina2Pipeline puts it, then "
        "' <Prompt Start> ', before the caption; its tokens count in --max_sequence_length). Default: the "
        "pipeline's own ('You are an assistant designed to generate superior images ...'). The model card's snippet "
        "passes a changed one to the pipeline, as diffusers' train_dreambooth_lora_lumina2.py --system_prompt "
        "does.",
        section="captions",
        resume="fixed",
    )
