"""Lumina 2's model card: the usage snippet (the system prompt and caption length training used, when they are not
the pipeline's), its rows and the license; the adapter is the kit's
(:class:`~dit_lora.families.diffusion.adapter.KitAdapter`: ``Lumina2Pipeline``'s saver, ``Lumina2LoraLoaderMixin``,
the VAE reloaded in fp32)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from dit_lora.families.diffusion.adapter import KitCard, Snippet, image_call_args, quoted
from dit_lora.families.lumina2.encoders import max_sequence_length

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: the VAE the reloaded pipeline decodes with in fp32
LUMINA2_VAE = "AutoencoderKL"


class Lumina2Card(KitCard):
    """``FamilySpec.card``: the model card's snippet, Lumina 2's rows and the base model's license."""

    def snippet(self, cfg: TrainConfig, repo_or_dir: str) -> Snippet:
        """Lumina2Pipeline with the adapter loaded, one image at the run's validation settings (with the trained
        system prompt and caption length where they are not the pipeline's own)."""
        *size_and_steps, seed = image_call_args(cfg)
        own = cfg.family_options.system_prompt
        system = [f"system_prompt={json.dumps(own)},  # the system prompt training used"] if own else []
        return Snippet(
            pipeline=self.info.pipeline_class_name,
            base=cfg.model.path,
            repo=repo_or_dir,
            quote=quoted,
            call_args=[
                f"{self.prompt(cfg)},",
                *size_and_steps,
                *system,
                *max_sequence_length.snippet_args(cfg),
                seed,
            ],
        )

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The density, the system prompt and the caption length."""
        options = cfg.family_options
        return {
            "weighting_scheme": options.weighting_scheme,
            "system_prompt": options.system_prompt or "Lumina2Pipeline's own",
            "max_sequence_length": max_sequence_length(cfg),
        }
