"""Sana's encoders (DC-AE latents, Gemma-2 caption embeddings through SanaPipeline's own ``encode_prompt``) and the
run's text settings (``--max_sequence_length``, the complex human instruction) recorded in its :class:`SanaRun`."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionEncoders
from dit_lora.families.diffusion.prompts import MASKED, caption_length, instruction, pipeline_prompts
from dit_lora.families.diffusion.text_conditioned import TextSettingsSetup, encoder_identity
from dit_lora.families.sana.state import run_state

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: SanaPipeline's default ``max_sequence_length``
DEFAULT_MAX_SEQUENCE_LENGTH = 300


def default_complex_human_instruction() -> list[str]:
    """The instruction prefix SanaPipeline uses by default at inference."""
    # Diffusers' pipelines import slowly: only when the prefix is asked for
    from diffusers import SanaPipeline

    return list(inspect.signature(SanaPipeline.__call__).parameters["complex_human_instruction"].default)


def max_sequence_length(cfg: TrainConfig) -> int:
    """``--max_sequence_length``, else SanaPipeline's default."""
    return cfg.data.max_sequence_length or DEFAULT_MAX_SEQUENCE_LENGTH


class SanaEncoders(DiffusionEncoders):
    """``FamilySpec.encoders``: the cache's encoders, and (:class:`~dit_lora.contract.capabilities.PromptText`) how a
    run encodes captions, said without loading a weight."""

    def text_settings(self, cfg: TrainConfig) -> TextSettings:
        """The run's caption length and, with ``--complex_human_instruction``, SanaPipeline's instruction prefix."""
        instruction = default_complex_human_instruction() if cfg.family_options.complex_human_instruction else None
        return TextSettings(
            max_sequence_length=max_sequence_length(cfg),
            instruction=tuple(instruction) if instruction is not None else None,
        )

    def cache_identity(self, cfg: TrainConfig, comps: Components | None = None) -> dict[str, Any]:
        """The model, its stamp, revision, variant, text dtype and the text settings (and a quantized encoder)."""
        return encoder_identity(
            cfg,
            "sana",
            complex_human_instruction=cfg.family_options.complex_human_instruction,
            max_sequence_length=max_sequence_length(cfg),
        )

    def encode_images(self, comps: Components, pixel_values: torch.Tensor) -> torch.Tensor:
        """Pixels through the DC-AE (fp32), scaled by its ``scaling_factor``."""
        vae = comps.encoders["vae"]
        with torch.no_grad():
            latents = vae.encode(pixel_values.to(vae.device, torch.float32)).latent
        return (latents * vae.config.scaling_factor).float()

    def encode_prompts(
        self, comps: Components, captions: list[str], *, with_negative: bool = False
    ) -> dict[str, torch.Tensor]:
        """Captions through SanaPipeline's own ``encode_prompt`` at the run's text settings (its prefix, truncation
        and token selection: training prompts are what SanaPipeline feeds the model at inference)."""
        text = comps.state.text if comps.state is not None else None
        return pipeline_prompts(
            comps,
            "SanaPipeline",
            captions,
            with_negative=with_negative,
            keys=MASKED,
            max_sequence_length=caption_length(text, DEFAULT_MAX_SEQUENCE_LENGTH),
            complex_human_instruction=instruction(text),
        )


class SanaSetup(TextSettingsSetup):
    """``FamilySpec.setup``: the run's text settings recorded in its :class:`SanaRun` once the components load."""

    run_state = staticmethod(run_state)
