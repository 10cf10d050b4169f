"""Sana's model card: the usage snippet (the DC-AE in fp32), Sana's rows and the license; the adapter is the kit's
(:class:`~dit_lora.families.diffusion.adapter.KitAdapter`, ``SanaPipeline``'s saver, the DC-AE reloaded in fp32)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dit_lora.families.diffusion.adapter import KitCard, Snippet, image_call_args, quoted
from dit_lora.families.sana.encoders import max_sequence_length

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: the VAE Sana decodes in fp32 (the reloaded pipeline's and the snippet's)
SANA_VAE = "AutoencoderDC"


class SanaCard(KitCard):
    """``FamilySpec.card``: the model card's snippet, Sana's rows and the license of Efficient-Large-Model's
    checkpoints."""

    def snippet(self, cfg: TrainConfig, repo_or_dir: str) -> Snippet:
        """SanaPipeline with the DC-AE in fp32, the adapter loaded, one image at the run's validation settings (and
        its caption length when it is not the pipeline's)."""
        chi = (
            []
            if cfg.family_options.complex_human_instruction
            else ["complex_human_instruction=None,  # trained without the prefix,"]
        )
        *size_and_steps, seed = image_call_args(cfg)
        return Snippet(
            pipeline=self.info.pipeline_class_name,
            base=cfg.model.path,
            repo=repo_or_dir,
            quote=quoted,
            vae=SANA_VAE,
            vae_comment="  # DC-AE stays fp32",
            call_args=[f"{self.prompt(cfg)},", *size_and_steps, *chi, *max_sequence_length.snippet_args(cfg), seed],
        )

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The weighting scheme, the instruction prefix and the caption length."""
        return {
            "weighting_scheme": cfg.family_options.weighting_scheme,
            "complex_human_instruction": cfg.family_options.complex_human_instruction,
            "max_sequence_length": max_sequence_length(cfg),
        }
