"""``Ideogram4Run``: what an Ideogram 4 run decides, kept in ``comps.state``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dit_lora.kit.guided_flow import GuidedFlowRun


@dataclass
class Ideogram4Run(GuidedFlowRun):
    """The per-run state of an Ideogram 4 run: the kit's flow state (the checkpoint's scheduler config, the caption
    length; the transformer has no guidance embedding) and the unconditional transformer the validation samples
    blend with the trained one (loaded only for them, waiting in host memory between them)."""

    guidance_embeds: bool = False
    #: ``Ideogram4Pipeline``'s ``unconditional_transformer`` (frozen, never adapted), or None: no validation samples
    unconditional: Any = None


#: ``comps.state``, an empty :class:`Ideogram4Run` put there first for components built by hand (tests).
run_state = Ideogram4Run.of
