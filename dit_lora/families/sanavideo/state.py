"""``SanaVideoRun``: what a SANA-Video run decides, kept in ``comps.state`` (typed, instead of string keys)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dit_lora.contract.capabilities import TextSettings


@dataclass
class SanaVideoRun:
    """The per-run state of a SANA-Video run (mutable: setup and the data stage fill it in)."""

    #: the checkpoint's scheduler config (the validation sampler is built from it)
    scheduler_config: dict[str, Any] | None = None
    #: the training scheduler's ``(sigmas, timesteps)`` on the run's device (``flow_matching.flow_tables``)
    flow_tables: tuple[torch.Tensor, torch.Tensor] | None = None
    #: the shift the tables were built with (``--flow_shift`` or NVlabs' training shift)
    flow_shift: float | None = None
    #: how captions are encoded (300 Gemma-2 tokens, the complex human instruction); set by ``configure``
    text: TextSettings | None = None
    #: the Wan VAE's latent normalisation, ``(1, C, 1, 1, 1)`` each (fp32)
    latents_mean: torch.Tensor | None = None
    latents_std: torch.Tensor | None = None
    #: image-to-video: the image validation videos start from (``kept_conditioning_image``)
    validation_image: Any = None


def run_state(comps) -> SanaVideoRun:
    """``comps.state``, an empty :class:`SanaVideoRun` put there first for components built by hand (tests)."""
    if comps.state is None:
        comps.state = SanaVideoRun()
    return comps.state


def required(value, name: str):
    """``value``, a part of the run state loading sets; refused by its name when components were built without it."""
    if value is None:
        raise ValueError(f"comps.state.{name} is not set: the SANA-Video components' loading sets it (model.py)")
    return value
