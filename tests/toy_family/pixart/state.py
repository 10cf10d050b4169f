"""``PixArtRun``: what a toy PixArt run decides, kept in ``comps.state`` (typed, instead of string keys)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .options import DEFAULT_TEXT_LENGTH


@dataclass
class PixArtRun:
    """The per-run state of a PixArt run (filled when the components load or are planned)."""

    #: the checkpoint's scheduler config (the validation sampler is built from it)
    scheduler_config: dict[str, Any] | None = None
    #: ``--pixart_text_length``: the tokens every caption is padded or cut to
    text_length: int = DEFAULT_TEXT_LENGTH
    #: whether the transformer predicts a variance too (``out_channels == 2 * in_channels``, as PixArt-alpha)
    learned_sigma: bool = False
    #: the latent channels: the epsilon half of a learned-sigma prediction
    in_channels: int = 4


def run_state(comps) -> PixArtRun:
    """``comps.state``, an empty :class:`PixArtRun` put there first for components built by hand (tests)."""
    if comps.state is None:
        comps.state = PixArtRun()
    return comps.state
