"""``SanaVideoRun``: what a SANA-Video run decides, kept in ``comps.state`` (typed, instead of string keys)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dit_lora.kit.run_state import FlowRun


@dataclass
class SanaVideoRun(FlowRun):
    """The per-run state of a SANA-Video run (mutable: setup and the data stage fill it in): the flow family's
    (``text``: 300 Gemma-2 tokens, the complex human instruction) and the video's own."""

    loaded_by: ClassVar[str] = "the SANA-Video components' loading sets it (model.py)"

    #: the shift the tables were built with (``--flow_shift`` or NVlabs' training shift)
    flow_shift: float | None = None
    #: the Wan VAE's latent normalisation, ``(1, C, 1, 1, 1)`` each (fp32)
    latents_mean: torch.Tensor | None = None
    latents_std: torch.Tensor | None = None
    #: image-to-video: the image validation videos start from (``kept_conditioning_image``)
    validation_image: Any = None


#: ``comps.state``, an empty :class:`SanaVideoRun` put there first for components built by hand (tests)
run_state = SanaVideoRun.of

#: a part of the run state loading sets; refused by its name when components were built without it
required = SanaVideoRun.required
