"""``QwenImageRun``: what a Qwen-Image run decides, kept in ``comps.state`` (typed, instead of string keys)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dit_lora.contract.capabilities import TextSettings
from dit_lora.kit.run_state import FamilyRun


@dataclass
class QwenImageRun(FamilyRun):
    """The per-run state of a Qwen-Image run (mutable: the setup and data stages fill it in as they decide)."""

    #: the checkpoint's scheduler config: the dynamic shift's base/max values and the validation sampler
    scheduler_config: dict[str, Any] = field(default_factory=dict)
    #: how captions are encoded (``--max_sequence_length``); set by ``configure``
    text: TextSettings | None = None
    #: the caption tokens any cached caption uses: every batch is cut to them; None: all
    text_tokens: int | None = None
    #: the VAE's per-channel latent normalisation (``latents_mean``, ``latents_std``), from its config
    latents_mean: tuple[float, ...] = ()
    latents_std: tuple[float, ...] = ()
    #: Edit: how targets are cropped, ``(--center_crop, --seed)``: each control image is cropped alike
    crop: tuple[bool, int] = (True, 0)
    #: Edit: the validation control images (``--validation_image`` or the first sample's) and each validation prompt's
    #: embeddings computed with them (and the negative's), by prompt, while the text encoder was loaded
    validation_controls: list[Any] | None = None
    validation_embeds: dict[str, dict[str, Any]] | None = None


#: ``comps.state``, an empty :class:`QwenImageRun` put there first for components built by hand (tests).
run_state = QwenImageRun.of
