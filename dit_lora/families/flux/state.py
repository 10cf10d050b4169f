"""``FluxRun``: what a FLUX.1 run decides, kept in ``comps.state``."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.families.diffusion.guided_flow import GuidedFlowRun


@dataclass
class FluxRun(GuidedFlowRun):
    """The per-run state of a FLUX.1 run: the kit's guided flow state (the checkpoint's scheduler config, its guidance
    embedding, the T5 caption length), nothing of its own yet."""


#: ``comps.state``, an empty :class:`FluxRun` put there first for components built by hand (tests).
run_state = FluxRun.of
