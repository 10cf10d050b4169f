"""Qwen-Image's adapter: saved by ``QwenImagePipeline.save_lora_weights``, loaded back into a stock
``QwenImagePipeline`` with ``load_lora_weights``, and the model card's usage snippet, rows and license."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from dit_lora.contract.spec import FamilyInfo
from dit_lora.core.quiet import dtype_kwarg
from dit_lora.families.qwenimage.encoders import NEGATIVE_PROMPT, max_sequence_length
from dit_lora.families.qwenimage.processor import load_processor
from dit_lora.output.adapter import attach_adapter


class QwenImageAdapter:
    """``FamilySpec.adapter``: diffusers' Qwen-Image LoRA file (``transformer.<module>.lora_A/B.weight`` keys)."""

    def __init__(self, info: FamilyInfo) -> None:
        self.info = info

    def save_adapter(self, output_dir: Path, lora_state: dict, lora_config: dict) -> Path:
        """The transformer's LoRA layers and their PEFT config, through the pipeline's own saver."""
        from diffusers import QwenImagePipeline  # slow import: only when the adapter is saved

        QwenImagePipeline.save_lora_weights(
            output_dir,
            transformer_lora_layers=lora_state,
            transformer_lora_adapter_metadata=lora_config,
            weight_name=self.info.adapter_weight_name,
            safe_serialization=True,
        )
        return Path(output_dir) / self.info.adapter_weight_name

    def load_pipeline_with_adapter(self, cfg, adapter_dir: Path, device: torch.device):
        """The base model's pipeline (text-to-image: VAE in fp32) with the saved adapter loaded by diffusers."""
        import diffusers
        from diffusers import AutoencoderKLQwenImage

        path = cfg.model.pretrained_model_name_or_path
        pipeline_class = getattr(diffusers, self.info.pipeline_class_name)
        if pipeline_class.__name__ == "QwenImagePipeline":  # it decodes in the VAE's own dtype: fp32, as trained
            vae = AutoencoderKLQwenImage.from_pretrained(
                path,
                subfolder="vae",
                revision=cfg.model.revision,
                **dtype_kwarg("diffusers", torch.float32),
                use_safetensors=True,
            )
            extra = {"vae": vae}
        else:  # the Edit pipelines encode their images in the prompt's dtype: the VAE in the pipeline's
            extra = {"processor": load_processor(path, cfg.model.revision)}  # built where torchvision is missing
        pipe = pipeline_class.from_pretrained(
            path,
            revision=cfg.model.revision,
            variant=cfg.model.variant,
            **dtype_kwarg("diffusers", cfg.weight_dtype),
            use_safetensors=True,
            **extra,
        )
        attach_adapter(None, pipe, adapter_dir)
        pipe.set_progress_bar_config(disable=True)
        return pipe.to(device)


class QwenImageCard:
    """``FamilySpec.card``: the model card's snippet, settings and the base model's license."""

    def __init__(self, info: FamilyInfo) -> None:
        self.info = info

    def usage_snippet(self, cfg, repo_or_dir: str) -> str:
        """The pipeline in bf16 with the adapter loaded, one image at the run's validation settings (the Edit models:
        of the image to edit, their processor built without torchvision, which transformers' would need)."""
        cls = self.info.pipeline_class_name
        edit = cls != "QwenImagePipeline"
        source = json.dumps(getattr(cfg.family_options, "validation_image", None) or "before.png")
        plus = cls == "QwenImageEditPlusPipeline"
        return (
            "import torch\n"
            f"from diffusers import {cls}\n"
            + (
                "from diffusers.utils import load_image\n"
                "from dit_lora import load_edit_processor  # Qwen2VLProcessor without torchvision\n"
                if edit
                else ""
            )
            + f"\nbase = {json.dumps(cfg.model.pretrained_model_name_or_path)}\n"
            + f"pipe = {cls}.from_pretrained(base, "
            + ("processor=load_edit_processor(base), " if edit else "")
            + "torch_dtype=torch.bfloat16)\n"
            f"pipe.load_lora_weights({json.dumps(repo_or_dir)})\n"
            'pipe.to("cuda" if torch.cuda.is_available() else "cpu")\n'
            + (f"image = load_image({source})  # the image to edit\n" if edit else "")
            + f"image = pipe(\n    prompt={json.dumps(cfg.validation.validation_prompt or 'a photo')},\n"
            + (f"    image={'[image]' if plus else 'image'},\n" if edit else "")
            + f"    negative_prompt={json.dumps(NEGATIVE_PROMPT)}, true_cfg_scale={cfg.validation.validation_guidance_scale},\n"
            f"    height={cfg.data.resolution}, width={cfg.data.resolution}, num_inference_steps={cfg.validation.validation_inference_steps},\n"
            "    generator=torch.manual_seed(0),\n"
            ").images[0]\n"
            'image.save("sample.png")\n'
        )

    def card_settings(self, cfg) -> dict[str, Any]:
        """The density, the shift and the caption length."""
        options = cfg.family_options
        return {
            "weighting_scheme": options.weighting_scheme,
            "qwen_shift_mode": options.qwen_shift_mode,
            **({"qwen_fixed_shift": options.qwen_fixed_shift} if options.qwen_shift_mode == "fixed" else {}),
            "max_sequence_length": max_sequence_length(cfg),
        }

    def base_model_license(self, cfg) -> str | None:
        """The Qwen-Image releases are Apache-2.0."""
        return "apache-2.0" if "Qwen/Qwen-Image" in cfg.model.pretrained_model_name_or_path else None
