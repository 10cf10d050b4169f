"""``LTX2Run``: what an LTX-2 run decides, kept in ``comps.state`` (typed, instead of string keys)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dit_lora.data.video import FrameStart
from dit_lora.kit.clip_audio import AudioGeometry
from dit_lora.kit.run_state import FlowRun


@dataclass
class LTX2Run(FlowRun):
    """The per-run state of an LTX-2 run (mutable: setup and the data stage fill it in): the flow family's (``text``:
    the caption length) and the two streams' own."""

    loaded_by: ClassVar[str] = "the LTX-2 components' loading sets it (model.py)"

    #: the video VAE's latent normalisation, ``(1, C, 1, 1, 1)`` each (fp32), and its ``scaling_factor``
    latents_mean: torch.Tensor | None = None
    latents_std: torch.Tensor | None = None
    scaling_factor: float = 1.0
    #: the video VAE's temporal compression (the pixel frames a latent clip stands for)
    vae_temporal: int = 8
    #: the audio VAE's geometry (the rate, hop and mel bins its spectrograms are made with)
    audio: AudioGeometry | None = None
    #: whether the clips' sound is trained (``--audio on``)
    with_audio: bool = True
    #: image-to-video: the image validation clips start from (``kept_conditioning_image``)
    validation_image: Any = None
    #: the transformer's features of one packed audio token (the silent stream's width with ``--audio off``)
    audio_width: int = 128
    #: IC-LoRA: the reference clips' downscale factor and how frames are taken (the references follow their clips)
    reference_factor: int = 1
    frame_start: FrameStart = "first"
    #: IC-LoRA: the validation clips' reference, PIL frames (``ic.load_reference_frames``)
    validation_reference: Any = None


#: ``comps.state``, an empty :class:`LTX2Run` put there first for components built by hand (tests)
run_state = LTX2Run.of

#: a part of the run state loading sets; refused by its name when components were built without it
required = LTX2Run.required
