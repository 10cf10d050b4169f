"""Krea 2's model card: the usage snippet, its rows and the license; the adapter is the kit's
(:class:`~dit_lora.families.diffusion.adapter.KitAdapter`: ``Krea2Pipeline``'s saver, ``Krea2LoraLoaderMixin``,
reloaded in the run's weight dtype).

ComfyUI (a125cd84, October 2025) has no Krea 2 model, so the card says so. Newer ComfyUI source, read for this
(``comfy/lora.py``'s ``model_lora_keys_unet`` and ``comfy.utils.krea2_to_diffusers``), maps every diffusers name of a
Krea 2 LoRA one to one onto its own modules, so the same file is meant to load there."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dit_lora.families.diffusion.adapter import KitCard, Snippet, image_call_args
from dit_lora.families.krea2.encoders import max_sequence_length

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: what the card says of ComfyUI
COMFYUI = (
    "ComfyUI: not checked. The ComfyUI checkout dit-lora tests against (a125cd84, October 2025) has no Krea 2 "
    "model; newer ComfyUI maps diffusers' Krea 2 LoRA names one to one (comfy.utils.krea2_to_diffusers)."
)


class Krea2Card(KitCard):
    """``FamilySpec.card``: the model card's snippet, Krea 2's rows and the base model's license."""

    def snippet(self, cfg: TrainConfig, repo_or_dir: str) -> Snippet:
        """Krea2Pipeline with the adapter loaded, one image at the run's validation settings (the guidance scale
        and the caption length when it is not the pipeline's)."""
        *size_and_steps, seed = image_call_args(cfg)
        return Snippet(
            pipeline=self.info.pipeline_class_name,
            base=cfg.model.path,
            repo=repo_or_dir,
            vae="AutoencoderKLQwenImage",
            vae_comment="  # decodes in fp32, as trained",
            to_comment="  # or pipe.enable_model_cpu_offload()",
            call_args=[f"prompt={self.prompt(cfg)},", *size_and_steps, *max_sequence_length.snippet_args(cfg), seed],
        )

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The density, the shift, the caption length, that no guidance embedding was fed, and ComfyUI."""
        options = cfg.family_options
        return {
            "weighting_scheme": options.weighting_scheme,
            "krea2_shift": options.krea2_shift if options.krea2_shift is not None else "the scheduler's",
            "max_sequence_length": max_sequence_length(cfg),
            "guidance": "none fed in training (Krea 2 has no guidance embedding; it samples with real CFG)",
            "sampling": "Krea's advice: sample with krea/Krea-2-Turbo (8 steps, guidance_scale 0.0), the adapter loaded "
            "there as above; Raw (the base trained here, and the run's validation samples) is not meant for inference",
            "comfyui": COMFYUI,
        }
