"""``FluxRun``: what a FLUX.1 run decides, kept in ``comps.state``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dit_lora.families.diffusion.run_state import FlowRun


@dataclass
class FluxRun(FlowRun):
    """The per-run state of a FLUX.1 run (mutable: setup fills it in as it decides): the flow family's (``text``: the
    T5 caption length the pipeline pads to) and what the checkpoint is."""

    #: the checkpoint's scheduler config (the dynamic shift's line and the validation sampler); {} until loaded
    scheduler_config: dict[str, Any] = field(default_factory=dict)
    #: the transformer has a guidance embedding (FLUX.1 [dev] is guidance-distilled)
    guidance_embeds: bool = True


#: ``comps.state``, an empty :class:`FluxRun` put there first for components built by hand (tests).
run_state = FluxRun.of
