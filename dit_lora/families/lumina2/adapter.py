"""Lumina 2's model card: the usage snippet (the system prompt and caption length training used, when they are not
the pipeline's), its rows and the license; the adapter is the kit's
(:class:`~dit_lora.kit.adapter.KitAdapter`: ``Lumina2Pipeline``'s saver, ``Lumina2LoraLoaderMixin``,
the VAE reloaded in fp32)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from dit_lora.families.lumina2.encoders import max_sequence_length
from dit_lora.kit.adapter import KitCard, quoted

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: the VAE the reloaded pipeline decodes with in fp32
LUMINA2_VAE = "AutoencoderKL"


class Lumina2Card(KitCard):
    """``FamilySpec.card``: the model card's snippet (the trained system prompt and caption length where they are not
    the pipeline's own), Lumina 2's rows and the base model's license."""

    quote, prompt_keyword = staticmethod(quoted), False

    def extra_call_args(self, cfg: TrainConfig) -> list[str]:
        """The system prompt and the caption length training used, where they are not the pipeline's."""
        own = cfg.family_options.system_prompt
        system = [f"system_prompt={json.dumps(own)},  # the system prompt training used"] if own else []
        return [*system, *max_sequence_length.snippet_args(cfg.data)]

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The density, the system prompt and the caption length."""
        return {
            **self.flow_rows(cfg.family_options),
            "system_prompt": cfg.family_options.system_prompt or "Lumina2Pipeline's own",
            "max_sequence_length": max_sequence_length(cfg.data),
        }
