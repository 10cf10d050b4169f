"""Z-Image's model card: the usage snippet, Z-Image's rows and the license; the adapter is the kit's
(:class:`~dit_lora.kit.adapter.KitAdapter`: ``ZImagePipeline``'s saver, ``ZImageLoraLoaderMixin``,
the VAE reloaded in fp32)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dit_lora.families.zimage.encoders import max_sequence_length
from dit_lora.kit.adapter import KitCard, quoted

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: the VAE the reloaded pipeline decodes with in fp32
ZIMAGE_VAE = "AutoencoderKL"


class ZImageCard(KitCard):
    """``FamilySpec.card``: the model card's snippet (the caption length when it is not the pipeline's), Z-Image's
    rows and the license of Tongyi-MAI's releases."""

    quote, prompt_keyword = staticmethod(quoted), False
    snippet_fields = {"base_name": None}

    def extra_call_args(self, cfg: TrainConfig) -> list[str]:
        """The caption length, where it is not the pipeline's."""
        return max_sequence_length.snippet_args(cfg.data)

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The timestep density and the caption length."""
        return {
            "timestep_sampling": cfg.family_options.timestep_sampling,
            "max_sequence_length": max_sequence_length(cfg.data),
        }
