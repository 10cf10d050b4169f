"""Sana's encoders (DC-AE latents, Gemma-2 caption embeddings through SanaPipeline's own ``encode_prompt``) and the
run's text settings (``--max_sequence_length``, the complex human instruction) recorded in its :class:`SanaRun`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dit_lora.contract.family import Components
from dit_lora.kit.prompts import CaptionLength
from dit_lora.kit.text_conditioned import InstructedCaptions

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: ``--max_sequence_length``, else SanaPipeline's default, 300
max_sequence_length = CaptionLength(300)


class SanaEncoders(InstructedCaptions):
    """``FamilySpec.encoders``: the cache's encoders, and (:class:`~dit_lora.contract.capabilities.PromptText`) how a
    run encodes captions, said without loading a weight: SanaPipeline's ``encode_prompt`` and instruction
    (:class:`~dit_lora.kit.text_conditioned.InstructedCaptions`), at ``--max_sequence_length``."""

    pipeline, identity_family, default_length = "SanaPipeline", "sana", max_sequence_length.default

    def text_length(self, cfg: TrainConfig) -> int:
        """:func:`max_sequence_length`."""
        return max_sequence_length(cfg.data)

    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> torch.Tensor:
        """Pixels through the DC-AE (fp32), scaled by its ``scaling_factor``."""
        vae = comps.encoders["vae"]
        with torch.no_grad():
            latents = vae.encode(pixel_values.to(vae.device, torch.float32)).latent
        return (latents * vae.config.scaling_factor).float()
