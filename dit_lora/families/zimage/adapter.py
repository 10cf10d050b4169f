"""Z-Image's model card: the usage snippet, Z-Image's rows and the license; the adapter is the kit's
(:class:`~dit_lora.families.diffusion.adapter.KitAdapter`: ``ZImagePipeline``'s saver, ``ZImageLoraLoaderMixin``,
the VAE reloaded in fp32)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dit_lora.families.diffusion.adapter import KitCard, Snippet, image_call_args, quoted
from dit_lora.families.zimage.encoders import max_sequence_length

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: the VAE the reloaded pipeline decodes with in fp32
ZIMAGE_VAE = "AutoencoderKL"


class ZImageCard(KitCard):
    """``FamilySpec.card``: the model card's snippet, Z-Image's rows and the license of Tongyi-MAI's releases."""

    def snippet(self, cfg: TrainConfig, repo_or_dir: str) -> Snippet:
        """ZImagePipeline with the adapter loaded, one image at the run's validation settings (and its caption length
        when it is not the pipeline's)."""
        *size_and_steps, seed = image_call_args(cfg)
        return Snippet(
            pipeline=self.info.pipeline_class_name,
            base=cfg.model.path,
            repo=repo_or_dir,
            base_name=None,
            quote=quoted,
            call_args=[
                f"{self.prompt(cfg)},",
                *size_and_steps,
                *max_sequence_length.snippet_args(cfg),
                seed,
            ],
        )

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The timestep density and the caption length."""
        return {
            "timestep_sampling": cfg.family_options.timestep_sampling,
            "max_sequence_length": max_sequence_length(cfg),
        }
