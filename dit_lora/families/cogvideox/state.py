"""``CogVideoXRun``: what a CogVideoX run decides, kept in ``comps.state`` (typed, instead of string keys)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dit_lora.kit.run_state import FamilyRun


@dataclass
class CogVideoXRun(FamilyRun):
    """The per-run state of a CogVideoX run (mutable: loading fills it, the data stage adds the validation image)."""

    #: the checkpoint's scheduler config (the validation sampler is built from it)
    scheduler_config: dict[str, Any] | None = None
    #: T5 tokens every prompt is padded to: the transformer's ``max_text_seq_length``
    max_sequence_length: int | None = None
    #: the VAE's spatial downsampling, ``2 ** (len(block_out_channels) - 1)`` (RoPE is computed in pixels)
    vae_scale_factor_spatial: int | None = None
    #: the rate validation videos are written at (1.0: 8, 1.5: 16)
    fps: int | None = None
    #: ``(h, w, latent frames, device)`` -> the pipeline's RoPE tensors, computed once per geometry
    rotary_cache: dict[tuple, Any] = field(default_factory=dict)
    #: image-to-video: the conditioning image of validation videos (``--validation_image`` or the first clip's
    #: first frame), taken once by the data stage
    validation_image: Any = None


#: ``comps.state``, an empty :class:`CogVideoXRun` put there first for components built by hand (tests, benchmarks).
run_state = CogVideoXRun.of
