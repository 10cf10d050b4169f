"""``ChromaRun``: what a Chroma run decides, kept in ``comps.state``."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.kit.guided_flow import GuidedFlowRun


@dataclass
class ChromaRun(GuidedFlowRun):
    """The per-run state of a Chroma run: the kit's guided flow state (the checkpoint's scheduler config, the T5
    caption length); Chroma's transformer has no guidance embedding."""

    guidance_embeds: bool = False
    #: the caption tokens any cached caption uses (``--trim_text_padding``): every batch is cut to them; None: all
    text_tokens: int | None = None


#: ``comps.state``, an empty :class:`ChromaRun` put there first for components built by hand (tests).
run_state = ChromaRun.of
