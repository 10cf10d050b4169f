"""``ZImageRun``: what a Z-Image run decides, kept in ``comps.state``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.families.diffusion.text_conditioned import run_tables


@dataclass
class ZImageRun:
    """The per-run state of a Z-Image run (the setup stage fills it in)."""

    #: the checkpoint's scheduler config (the validation sampler is built from it)
    scheduler_config: dict[str, Any] | None = None
    #: the training scheduler's ``(sigmas, timesteps)`` on the run's device (``flow_matching.flow_tables``)
    flow_tables: tuple[torch.Tensor, torch.Tensor] | None = None
    #: how captions are encoded (``--max_sequence_length``); set by ``configure``
    text: TextSettings | None = None


def run_state(comps) -> ZImageRun:
    """``comps.state``, an empty :class:`ZImageRun` put there first for components built by hand (tests)."""
    if comps.state is None:
        comps.state = ZImageRun()
    return comps.state


def tables(comps, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The run's flow tables, built on ``device`` once when the components were built by hand (not per step)."""
    return run_tables(run_state(comps), comps, device)
