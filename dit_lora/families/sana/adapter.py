"""Sana's model card: the usage snippet (the DC-AE in fp32), Sana's rows and the license; the adapter is the kit's
(:class:`~dit_lora.kit.adapter.KitAdapter`, ``SanaPipeline``'s saver, the DC-AE reloaded in fp32)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dit_lora.families.sana.encoders import max_sequence_length
from dit_lora.kit.adapter import KitCard, quoted

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: the VAE Sana decodes in fp32 (the reloaded pipeline's and the snippet's)
SANA_VAE = "AutoencoderDC"


class SanaCard(KitCard):
    """``FamilySpec.card``: the model card's snippet (the DC-AE in fp32, the instruction prefix and caption length
    when they are not the pipeline's), Sana's rows and the license of Efficient-Large-Model's checkpoints."""

    quote, prompt_keyword = staticmethod(quoted), False
    snippet_fields = {"vae": SANA_VAE, "vae_comment": "  # DC-AE stays fp32"}

    def extra_call_args(self, cfg: TrainConfig) -> list[str]:
        """No instruction prefix where training had none, and the caption length where it is not the pipeline's."""
        chi = (
            []
            if cfg.family_options.complex_human_instruction
            else ["complex_human_instruction=None,  # trained without the prefix,"]
        )
        return [*chi, *max_sequence_length.snippet_args(cfg.data)]

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The weighting scheme, the instruction prefix and the caption length."""
        return {
            **self.flow_rows(cfg.family_options),
            "complex_human_instruction": cfg.family_options.complex_human_instruction,
            "max_sequence_length": max_sequence_length(cfg.data),
        }
