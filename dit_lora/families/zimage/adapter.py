"""Z-Image's adapter: saved by ZImagePipeline's own saver (``ZImageLoraLoaderMixin``), loaded back into a
ZImagePipeline, and the model card's usage snippet, rows and license."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from dit_lora.contract.spec import FamilyInfo
from dit_lora.core.quiet import dtype_kwarg
from dit_lora.families.zimage.encoders import max_sequence_length
from dit_lora.output.adapter import attach_adapter


class ZImageAdapter:
    """``FamilySpec.adapter``: ``ZImagePipeline.save_lora_weights`` and ``load_lora_weights``."""

    def __init__(self, info: FamilyInfo) -> None:
        self.info = info

    def save_adapter(self, output_dir: Path, lora_state: dict, lora_config: dict) -> Path:
        """The transformer's LoRA layers and their PEFT config as diffusers' Z-Image LoRA file."""
        from diffusers import ZImagePipeline  # slow import: only when the adapter is saved

        ZImagePipeline.save_lora_weights(
            output_dir,
            transformer_lora_layers=lora_state,
            transformer_lora_adapter_metadata=lora_config,
            weight_name=self.info.adapter_weight_name,
            safe_serialization=True,
        )
        return Path(output_dir) / self.info.adapter_weight_name

    def load_pipeline_with_adapter(self, cfg, adapter_dir: Path, device: torch.device):
        """A ZImagePipeline of the base model (VAE in fp32) with the saved adapter loaded by diffusers."""
        from diffusers import AutoencoderKL, ZImagePipeline  # heavy: only for the final samples

        path = cfg.model.pretrained_model_name_or_path
        vae = AutoencoderKL.from_pretrained(
            path,
            subfolder="vae",
            revision=cfg.model.revision,
            **dtype_kwarg("diffusers", torch.float32),
            use_safetensors=True,
        )
        pipe = ZImagePipeline.from_pretrained(
            path,
            vae=vae,
            revision=cfg.model.revision,
            variant=cfg.model.variant,
            **dtype_kwarg("diffusers", cfg.weight_dtype),
            use_safetensors=True,
        )
        attach_adapter(None, pipe, adapter_dir)
        pipe.set_progress_bar_config(disable=True)
        return pipe.to(device)


class ZImageCard:
    """``FamilySpec.card``: the model card's snippet, Z-Image's rows and the license of Tongyi-MAI's releases."""

    def usage_snippet(self, cfg, repo_or_dir: str) -> str:
        """ZImagePipeline with the adapter loaded, one image at the run's validation settings."""
        return (
            "import torch\n"
            "from diffusers import ZImagePipeline\n\n"
            f'pipe = ZImagePipeline.from_pretrained("{cfg.model.pretrained_model_name_or_path}", torch_dtype=torch.bfloat16)\n'
            f'pipe.load_lora_weights("{repo_or_dir}")\n'
            'pipe.to("cuda" if torch.cuda.is_available() else "cpu")\n'
            f"image = pipe(\n    {json.dumps(cfg.validation.validation_prompt or 'a photo')},\n"
            f"    height={cfg.data.resolution}, width={cfg.data.resolution},\n"
            f"    num_inference_steps={cfg.validation.validation_inference_steps}, "
            f"guidance_scale={cfg.validation.validation_guidance_scale},\n"
            "    generator=torch.manual_seed(0),\n"
            ").images[0]\n"
            'image.save("sample.png")\n'
        )

    def card_settings(self, cfg) -> dict[str, Any]:
        """The timestep density and the caption length."""
        return {
            "timestep_sampling": cfg.family_options.timestep_sampling,
            "max_sequence_length": max_sequence_length(cfg),
        }

    def base_model_license(self, cfg) -> str | None:
        """Tongyi-MAI's Z-Image releases are Apache 2.0."""
        return "apache-2.0" if "Tongyi-MAI" in cfg.model.pretrained_model_name_or_path else None
