"""Ideogram 4's model card: the usage snippet, its rows and the license; the adapter is the kit's
(:class:`~dit_lora.kit.adapter.KitAdapter`: ``Ideogram4Pipeline``'s saver, ``Ideogram4LoraLoaderMixin``,
which loads it into the conditional ``transformer`` only, reloaded in the run's weight dtype).

ComfyUI: the checkout dit-lora tests against (a125cd84, October 2025) has no Ideogram 4, so the card says so. Newer
ComfyUI has an ``Ideogram4`` model (``comfy/supported_models.py``), but its ``model_lora_keys_unet`` maps no
Ideogram 4 names of its own, and whether its transformer is fused (``attention.qkv``) is not known here: not
checked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dit_lora.families.ideogram4.encoders import max_sequence_length
from dit_lora.kit.adapter import SEED_ARGUMENT, KitCard

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: what the card says of ComfyUI
COMFYUI = (
    "ComfyUI: not checked. The ComfyUI checkout dit-lora tests against (a125cd84, October 2025) has no Ideogram 4 "
    "model; newer ComfyUI has one, with no LoRA key mapping of its own for it."
)


class Ideogram4Card(KitCard):
    """``FamilySpec.card``: the model card's snippet (the VAE in fp32, its one guidance scale in place of the
    pipeline's schedule, and the caption length when it is not the pipeline's), Ideogram 4's rows and the base
    model's license."""

    snippet_fields = {
        "vae": "AutoencoderKLFlux2",
        "vae_comment": "  # decodes in fp32, as trained",
        "to_comment": "  # the two transformers: about 37 GB in bf16",
    }

    def call_args(self, cfg: TrainConfig) -> list[str]:
        """The prompt, the size and steps, the run's one guidance scale with the pipeline's schedule off, the caption
        length where it is not the pipeline's, the seed."""
        size, validation = cfg.data.resolution, cfg.validation
        return [
            *self.prompt_args(cfg.data, cfg.validation),
            f"height={size}, width={size}, num_inference_steps={validation.validation_inference_steps},",
            f"guidance_scale={validation.validation_guidance_scale}, guidance_schedule=None,  # or the "
            "pipeline's own schedule: leave both out",
            *max_sequence_length.snippet_args(cfg.data),
            SEED_ARGUMENT,
        ]

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The density, the caption length, what the LoRA adapts, autocast, and ComfyUI."""
        options = cfg.family_options
        return {
            **self.flow_rows(cfg.family_options),
            "logit_mean": f"{options.logit_mean} at 512 x 512 px, moved by 0.5 log(pixels / 512^2) (Ideogram4Pipeline's "
            "resolution-aware schedule)",
            "logit_std": options.logit_std,
            "max_sequence_length": max_sequence_length(cfg.data),
            "adapted": "the conditional transformer only (Ideogram4Pipeline loads a LoRA there; the unconditional "
            "transformer of its asymmetric guidance is left as it is)",
            "autocast": "off around the transformer (diffusers' README: autocast corrupts Ideogram 4's predictions)",
            "comfyui": COMFYUI,
        }
