"""Qwen-Image's adapter and model card on the kit: saved by the pipeline's own saver, loaded back into the stock
pipeline (text-to-image: the VAE in fp32; the Edit pipelines: their processor built without torchvision), and the
card's usage snippet, rows and license."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from dit_lora.contract.spec import FamilyInfo
from dit_lora.families.qwenimage.encoders import NEGATIVE_PROMPT, max_sequence_length
from dit_lora.families.qwenimage.processor import load_processor
from dit_lora.kit.adapter import SEED_ARGUMENT, KitAdapter, KitCard, Snippet
from dit_lora.kit.conditioning import card_input_source

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: the text-to-image pipeline (the others are the Edit models')
T2I_PIPELINE = "QwenImagePipeline"


class QwenImageAdapter(KitAdapter):
    """``FamilySpec.adapter``: diffusers' Qwen-Image LoRA file (``transformer.<module>.lora_A/B.weight`` keys);
    text-to-image reloads its VAE in fp32 (it decodes in the VAE's own dtype: fp32, as trained), the Edit pipelines
    encode their images in the prompt's dtype (the VAE in the pipeline's)."""

    def __init__(self, info: FamilyInfo) -> None:
        edit = info.pipeline_class_name != T2I_PIPELINE
        super().__init__(info, fp32_vae=None if edit else "AutoencoderKLQwenImage")

    def pipeline_parts(self, cfg: TrainConfig, common: dict[str, Any]) -> dict[str, Any]:
        """The VAE in fp32 (text-to-image), or the Edit models' processor, built where torchvision is missing."""
        if self.fp32_vae is not None:
            return super().pipeline_parts(cfg, common)
        return {"processor": load_processor(cfg.model.path, cfg.model.revision)}


class QwenImageCard(KitCard):
    """``FamilySpec.card``: the model card's snippet, settings and the base model's license."""

    def snippet(self, cfg: TrainConfig, repo_or_dir: str) -> Snippet:
        """The pipeline in bf16 with the adapter loaded, one image at the run's validation settings (the Edit models:
        of the image to edit, their processor built without torchvision, which transformers' would need)."""
        cls = self.info.pipeline_class_name
        edit = cls != T2I_PIPELINE
        source = card_input_source()  # the run's image to edit, beside the adapter
        image_arg = "[image]" if cls == "QwenImageEditPlusPipeline" else "image"
        return Snippet(
            pipeline=cls,
            base=cfg.model.path,
            repo=repo_or_dir,
            imports=[
                "from diffusers.utils import load_image\n",
                "from dit_lora import load_edit_processor  # Qwen2VLProcessor without torchvision\n",
            ]
            if edit
            else [],
            pipe_kwargs="processor=load_edit_processor(base), " if edit else "",
            before_call=f"image = load_image({source})  # the image to edit\n" if edit else "",
            call_args=[
                f"prompt={self.prompt(cfg.validation)},",
                *([f"image={image_arg},"] if edit else []),
                f"negative_prompt={json.dumps(NEGATIVE_PROMPT)}, true_cfg_scale={cfg.validation.validation_guidance_scale},",
                f"height={cfg.data.resolution}, width={cfg.data.resolution}, "
                f"num_inference_steps={cfg.validation.validation_inference_steps},",
                *max_sequence_length.snippet_args(cfg.data),
                SEED_ARGUMENT,
            ],
        )

    def card_settings(self, cfg: TrainConfig) -> dict[str, Any]:
        """The density, the shift and the caption length."""
        options = cfg.family_options
        return {
            "weighting_scheme": options.weighting_scheme,
            "qwen_shift_mode": options.qwen_shift_mode,
            **({"qwen_fixed_shift": options.qwen_fixed_shift} if options.qwen_shift_mode == "fixed" else {}),
            "max_sequence_length": max_sequence_length(cfg.data),
        }
