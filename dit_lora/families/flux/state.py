"""``FluxRun``: what a FLUX.1 run decides, kept in ``comps.state``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dit_lora.kit.guided_flow import GuidedFlowRun


@dataclass
class FluxRun(GuidedFlowRun):
    """The per-run state of a FLUX.1 run: the kit's guided flow state (the checkpoint's scheduler config, its guidance
    embedding, the T5 caption length) and, for Kontext, what its control images need."""

    #: Kontext: how the targets are cropped, ``(center_crop, seed)``: the control images are cropped alike
    crop: tuple[bool, int] = (False, 0)
    #: Kontext: the validation samples' control pixels ``(3, H, W)`` (``--validation_image`` or the first sample's)
    validation_control: Any = None


#: ``comps.state``, an empty :class:`FluxRun` put there first for components built by hand (tests).
run_state = FluxRun.of
