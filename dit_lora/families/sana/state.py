"""``SanaRun``: what a Sana run decides, kept in ``comps.state`` (typed, instead of string keys)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.families.diffusion.text_conditioned import run_tables


@dataclass
class SanaRun:
    """The per-run state of a Sana run (mutable: the setup and data stages fill it in as they decide)."""

    #: the checkpoint's scheduler config (the validation sampler is built from it)
    scheduler_config: dict[str, Any] | None = None
    #: the training scheduler's ``(sigmas, timesteps)`` on the run's device (``flow_matching.flow_tables``)
    flow_tables: tuple[torch.Tensor, torch.Tensor] | None = None
    #: how captions are encoded (``--max_sequence_length``, the complex human instruction); set by ``configure``
    text: TextSettings | None = None
    #: the caption tokens any cached caption uses (``--trim_text_padding``): every batch is cut to them; None: all
    text_tokens: int | None = None


def run_state(comps) -> SanaRun:
    """``comps.state``, an empty :class:`SanaRun` put there first for components built by hand (tests, benchmarks)."""
    if comps.state is None:
        comps.state = SanaRun()
    return comps.state


def tables(comps, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The run's flow tables, built on ``device`` once when the components were built by hand (not per step)."""
    return run_tables(run_state(comps), comps, device)
