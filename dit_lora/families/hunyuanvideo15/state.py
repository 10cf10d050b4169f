"""``HunyuanVideo15Run``: what a HunyuanVideo 1.5 run decides, kept in ``comps.state`` (typed, instead of string keys)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from dit_lora.kit.run_state import FlowRun


@dataclass
class HunyuanVideo15Run(FlowRun):
    """The per-run state of a HunyuanVideo 1.5 run (mutable: setup and the data stage fill it in): the flow family's
    (``text``: the Qwen2.5-VL caption length) and the video's own."""

    loaded_by: ClassVar[str] = "the HunyuanVideo 1.5 components' loading sets it (model.py)"

    #: the shift the tables were built with (``--flow_shift`` or the checkpoint scheduler's)
    flow_shift: float | None = None
    #: the VAE's ``scaling_factor`` (the pipelines multiply latents by it)
    scaling_factor: float | None = None
    #: image-to-video: the image validation videos start from (``kept_conditioning_image``)
    validation_image: Any = None


#: ``comps.state``, an empty :class:`HunyuanVideo15Run` put there first for components built by hand (tests)
run_state = HunyuanVideo15Run.of

#: a part of the run state loading sets; refused by its name when components were built without it
required = HunyuanVideo15Run.required
