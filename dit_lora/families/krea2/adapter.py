"""Krea 2's model card: the usage snippet, its rows and the license; the adapter is the kit's
(:class:`~dit_lora.kit.adapter.KitAdapter`: ``Krea2Pipeline``'s saver, ``Krea2LoraLoaderMixin``,
reloaded in the run's weight dtype).

ComfyUI (a125cd84, October 2025) has no Krea 2 model, so the card says so. Newer ComfyUI source, read for this
(``comfy/lora.py``'s ``model_lora_keys_unet`` and ``comfy.utils.krea2_to_diffusers``), maps every diffusers name of a
Krea 2 LoRA one to one onto its own modules, so the same file is meant to load there."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dit_lora.families.krea2.encoders import max_sequence_length
from dit_lora.kit.adapter import KitCard

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: what the card says of ComfyUI
COMFYUI = (
    "ComfyUI: not checked. The ComfyUI checkout dit-lora tests against (a125cd84, October 2025) has no Krea 2 "
    "model; newer ComfyUI maps diffusers' Krea 2 LoRA names one to one (comfy.utils.krea2_to_diffusers)."
)


class Krea2Card(KitCard):
    """``FamilySpec.card``: the model card's snippet (the VAE in fp32, the caption length when it is not the
    pipeline's), Krea 2's rows and the base model's license."""

    snippet_fields = {
        "vae": "AutoencoderKLQwenImage",
        "vae_comment": "  # decodes in fp32, as trained",
        "to_comment": "  # or pipe.enable_model_cpu_offload()",
    }

    def extra_call_args(self, cfg: TrainConfig) -> list[str]:
        """The caption length, where it is not the pipeline's."""
        return max_sequence_length.snippet_args(cfg.data)

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The density, the shift, the caption length, that no guidance embedding was fed, and ComfyUI."""
        return {
            **self.flow_rows(cfg.family_options, "krea2_shift"),
            "max_sequence_length": max_sequence_length(cfg.data),
            "guidance": "none fed in training (Krea 2 has no guidance embedding; it samples with real CFG)",
            "sampling": "Krea's advice: sample with krea/Krea-2-Turbo (8 steps, guidance_scale 0.0), the adapter loaded "
            "there as above; Raw (the base trained here, and the run's validation samples) is not meant for inference",
            "comfyui": COMFYUI,
        }
