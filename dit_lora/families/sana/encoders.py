"""Sana's encoders (DC-AE latents, Gemma-2 caption embeddings through SanaPipeline's own ``encode_prompt``) and the
run's text settings (``--max_sequence_length``, the complex human instruction) recorded in its :class:`SanaRun`."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from dit_lora.contract.capabilities import TextSettings
from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionEncoders
from dit_lora.families.diffusion.text_conditioned import TextSettingsSetup, encoder_identity
from dit_lora.families.sana.state import run_state

#: SanaPipeline's default ``max_sequence_length``
DEFAULT_MAX_SEQUENCE_LENGTH = 300


def default_complex_human_instruction() -> list[str]:
    """The instruction prefix SanaPipeline uses by default at inference."""
    # Diffusers' pipelines import slowly: only when the prefix is asked for
    from diffusers import SanaPipeline

    return list(inspect.signature(SanaPipeline.__call__).parameters["complex_human_instruction"].default)


def max_sequence_length(cfg) -> int:
    """``--max_sequence_length``, else SanaPipeline's default."""
    return cfg.data.max_sequence_length or DEFAULT_MAX_SEQUENCE_LENGTH


class SanaEncoders(DiffusionEncoders):
    """``FamilySpec.encoders``: the cache's encoders, and (:class:`~dit_lora.contract.capabilities.PromptText`) how a
    run encodes captions, said without loading a weight."""

    def text_settings(self, cfg) -> TextSettings:
        """The run's caption length and, with ``--complex_human_instruction``, SanaPipeline's instruction prefix."""
        instruction = default_complex_human_instruction() if cfg.family_options.complex_human_instruction else None
        return TextSettings(
            max_sequence_length=max_sequence_length(cfg),
            instruction=tuple(instruction) if instruction is not None else None,
        )

    def cache_identity(self, cfg, comps: Components | None = None) -> dict[str, Any]:
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
        """Captions through SanaPipeline's own ``encode_prompt`` at the run's text settings."""
        # Diffusers' pipelines import slowly: only when captions are encoded
        from diffusers import SanaPipeline

        text = comps.state.text if comps.state is not None else None
        # The pipeline's own encode_prompt (prefix, truncation, token selection) keeps training
        # prompts identical to what SanaPipeline feeds the model at inference.
        # Any: mypy takes diffusers' top-level classes for the dummy placeholders its __init__ imports first
        pipe: Any = SanaPipeline(
            tokenizer=comps.encoders["tokenizer"],
            text_encoder=comps.encoders["text_encoder"],
            vae=None,
            transformer=None,
            scheduler=None,
        )
        with torch.no_grad():
            embeds, mask, neg, neg_mask = pipe.encode_prompt(
                list(captions),
                do_classifier_free_guidance=with_negative,
                negative_prompt="",
                device=comps.encoders["text_encoder"].device,
                max_sequence_length=text.max_sequence_length if text else DEFAULT_MAX_SEQUENCE_LENGTH,
                complex_human_instruction=list(text.instruction) if text and text.instruction else None,
            )
        out = {"prompt_embeds": embeds, "prompt_attention_mask": mask}
        if with_negative:
            out.update(negative_prompt_embeds=neg, negative_prompt_attention_mask=neg_mask)
        return out


class SanaSetup(TextSettingsSetup):
    """``FamilySpec.setup``: the run's text settings recorded in its :class:`SanaRun` once the components load."""

    run_state = staticmethod(run_state)
