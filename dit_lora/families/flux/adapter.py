"""FLUX.1's model card: the usage snippet, its rows (the training guidance said) and the license; the adapter is the
kit's (:class:`~dit_lora.kit.adapter.KitAdapter`: ``FluxPipeline``'s saver, ``FluxLoraLoaderMixin``,
reloaded in the run's weight dtype, VAE included: the pipeline decodes in the transformer's dtype).

ComfyUI loads the diffusers file as it is: ``model_lora_keys_unet`` (``comfy/lora.py``) maps every diffusers name of
a FLUX.1 model under ``transformer.`` through ``comfy.utils.flux_to_diffusers``, q/k/v (and the single blocks'
``proj_mlp``) as slices of BFL's fused ``qkv`` / ``linear1``, so no ComfyUI-named copy is written."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dit_lora.families.flux.encoders import max_sequence_length
from dit_lora.kit.adapter import KitCard
from dit_lora.kit.conditioning import card_input_source

if TYPE_CHECKING:
    from dit_lora.config.schema import DataOptions, TrainConfig, ValidationOptions


class FluxCard(KitCard):
    """``FamilySpec.card``: the model card's snippet (the guidance, and the caption length when it is not the
    pipeline's; Kontext's edits an image, at the run's area), FLUX.1's rows and the base model's license."""

    snippet_fields = {"to_comment": "  # or pipe.enable_model_cpu_offload()"}

    def edits(self) -> bool:
        """Whether the card is Kontext's."""
        return self.info.pipeline_class_name == "FluxKontextPipeline"

    def prompt_args(self, data: DataOptions, validation: ValidationOptions) -> list[str]:
        """The prompt; Kontext's image to edit after it, at the trained size: FluxKontextPipeline fits height x width
        into max_area (default 1024 x 1024) and snaps the image to its preferred ~1 MP sizes."""
        if not self.edits():
            return super().prompt_args(data, validation)
        size = data.resolution
        kept = [f"max_area={size * size}, _auto_resize=False,  # the trained size"] if size != 1024 else []
        return [*super().prompt_args(data, validation), "image=image,", *kept]

    def extra_call_args(self, cfg: TrainConfig) -> list[str]:
        """The caption length, where it is not the pipeline's."""
        return max_sequence_length.snippet_args(cfg.data)

    def snippet_parts(self, cfg: TrainConfig) -> dict[str, Any]:
        """Kontext's image to edit, loaded and fitted to the trained size before the call."""
        if not self.edits():
            return {}
        source = card_input_source()  # the run's image to edit, beside the adapter
        size = cfg.data.resolution
        return {
            "imports": ["from diffusers.utils import load_image\n", "from PIL import ImageOps\n"],
            "before_call": f"image = ImageOps.fit(load_image({source}), ({size}, {size}))  # the image to edit, as trained\n",
        }

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The density, the shift, the guidance the embedding was fed in training, and the caption length."""
        return {
            **self.flow_rows(cfg.family_options, "flux_shift", unset="dynamic"),
            "flux_train_guidance": cfg.family_options.flux_train_guidance,
            "max_sequence_length": max_sequence_length(cfg.data),
        }
