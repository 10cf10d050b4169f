"""``Krea2Run``: what a Krea 2 run decides, kept in ``comps.state``."""

from __future__ import annotations

from dataclasses import dataclass

from dit_lora.kit.guided_flow import GuidedFlowRun

#: Krea2Pipeline's default taps of Qwen3-VL-4B's hidden states (``text_encoder_select_layers``)
DEFAULT_TAPS = (2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35)


def tapped_layers(index: dict) -> tuple[int, ...]:
    """The text encoder's hidden states Krea2Pipeline stacks per token: the folder's ``text_encoder_select_layers``,
    else the pipeline's default taps of Qwen3-VL-4B."""
    return tuple(index.get("text_encoder_select_layers") or DEFAULT_TAPS)


@dataclass
class Krea2Run(GuidedFlowRun):
    """The per-run state of a Krea 2 run: the kit's guided flow state (the checkpoint's scheduler config, the caption
    length; Krea 2's transformer has no guidance embedding) and the text encoder's layers the pipeline taps."""

    guidance_embeds: bool = False
    #: the hidden states stacked per caption token (the folder's ``model_index.json``, else the pipeline's default)
    select_layers: tuple[int, ...] = DEFAULT_TAPS


#: ``comps.state``, an empty :class:`Krea2Run` put there first for components built by hand (tests).
run_state = Krea2Run.of
