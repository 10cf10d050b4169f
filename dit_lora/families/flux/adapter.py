"""FLUX.1's model card: the usage snippet, its rows (the training guidance said) and the license; the adapter is the
kit's (:class:`~dit_lora.families.diffusion.adapter.KitAdapter`: ``FluxPipeline``'s saver, ``FluxLoraLoaderMixin``,
reloaded in the run's weight dtype, VAE included: the pipeline decodes in the transformer's dtype).

ComfyUI loads the diffusers file as it is: ``model_lora_keys_unet`` (``comfy/lora.py``) maps every diffusers name of
a FLUX.1 model under ``transformer.`` through ``comfy.utils.flux_to_diffusers``, q/k/v (and the single blocks'
``proj_mlp``) as slices of BFL's fused ``qkv`` / ``linear1``, so no ComfyUI-named copy is written."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from dit_lora.families.diffusion.adapter import KitCard, Snippet, image_call_args
from dit_lora.families.flux.encoders import max_sequence_length

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


class FluxCard(KitCard):
    """``FamilySpec.card``: the model card's snippet, FLUX.1's rows and the base model's license."""

    def snippet(self, cfg: TrainConfig, repo_or_dir: str) -> Snippet:
        """FluxPipeline with the adapter loaded, one image at the run's validation settings (its guidance, and the
        caption length when it is not the pipeline's); Kontext's edits an image, at the run's area."""
        *size_and_steps, seed = image_call_args(cfg)
        edit = self.info.pipeline_class_name == "FluxKontextPipeline"
        source = json.dumps(getattr(cfg.family_options, "validation_image", None) or "before.png")
        size = cfg.data.resolution
        # FluxKontextPipeline fits height x width into max_area (default 1024 x 1024) and snaps the image to its
        # preferred ~1 MP sizes: a run of another size keeps the size it trained at
        kept = [f"max_area={size * size}, _auto_resize=False,  # the trained size"] if size != 1024 else []
        image_args = ["image=image,", *kept] if edit else []
        return Snippet(
            pipeline=self.info.pipeline_class_name,
            base=cfg.model.path,
            repo=repo_or_dir,
            imports=["from diffusers.utils import load_image\n", "from PIL import ImageOps\n"] if edit else [],
            before_call=f"image = ImageOps.fit(load_image({source}), ({size}, {size}))  # the image to edit, as trained\n"
            if edit
            else "",
            to_comment="  # or pipe.enable_model_cpu_offload()",
            call_args=[
                f"prompt={self.prompt(cfg)},",
                *image_args,
                *size_and_steps,
                *max_sequence_length.snippet_args(cfg),
                seed,
            ],
        )

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The density, the shift, the guidance the embedding was fed in training, and the caption length."""
        options = cfg.family_options
        return {
            "weighting_scheme": options.weighting_scheme,
            "flux_shift": options.flux_shift if options.flux_shift is not None else "dynamic",
            "flux_train_guidance": options.flux_train_guidance,
            "max_sequence_length": max_sequence_length(cfg),
        }
