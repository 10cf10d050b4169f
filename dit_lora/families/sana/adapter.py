"""Sana's adapter: saved by SanaPipeline's own saver, loaded back into a SanaPipeline, and the model card's
usage snippet, rows and license."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from dit_lora.contract.spec import FamilyInfo
from dit_lora.core.quiet import dtype_kwarg
from dit_lora.families.sana.encoders import max_sequence_length
from dit_lora.output.adapter import attach_adapter


class SanaAdapter:
    """``FamilySpec.adapter``: ``SanaPipeline.save_lora_weights`` and ``load_lora_weights``."""

    def __init__(self, info: FamilyInfo) -> None:
        self.info = info

    def save_adapter(self, output_dir: Path, lora_state: dict, lora_config: dict) -> Path:
        """The transformer's LoRA layers and their PEFT config as diffusers' Sana LoRA file."""
        # Diffusers' pipelines import slowly: only when the adapter is saved
        from diffusers import SanaPipeline

        SanaPipeline.save_lora_weights(
            output_dir,
            transformer_lora_layers=lora_state,
            transformer_lora_adapter_metadata=lora_config,
            weight_name=self.info.adapter_weight_name,
            safe_serialization=True,
        )
        return Path(output_dir) / self.info.adapter_weight_name

    def load_pipeline_with_adapter(self, cfg, adapter_dir: Path, device: torch.device):
        """A SanaPipeline of the base model (DC-AE in fp32) with the saved adapter loaded by diffusers."""
        from diffusers import (  # heavy: only for the final samples
            AutoencoderDC,
            SanaPipeline,
        )

        path = cfg.model.pretrained_model_name_or_path
        # Load the DC-AE in fp32 directly: a bf16 load followed by .to(fp32) would already have lost precision.
        vae = AutoencoderDC.from_pretrained(
            path,
            subfolder="vae",
            revision=cfg.model.revision,
            **dtype_kwarg("diffusers", torch.float32),
            use_safetensors=True,
        )
        pipe = SanaPipeline.from_pretrained(
            path,
            vae=vae,
            revision=cfg.model.revision,
            variant=cfg.model.variant,
            **dtype_kwarg("diffusers", cfg.weight_dtype),
            use_safetensors=True,
        )
        attach_adapter(None, pipe, adapter_dir)  # Sana fits no consumer before the adapter loads
        pipe.set_progress_bar_config(disable=True)
        return pipe.to(device)


class SanaCard:
    """``FamilySpec.card``: the model card's snippet, Sana's rows and the license of Efficient-Large-Model's
    checkpoints."""

    def usage_snippet(self, cfg, repo_or_dir: str) -> str:
        """SanaPipeline with the DC-AE in fp32, the adapter loaded, one image at the run's validation settings."""
        chi = (
            ""
            if cfg.family_options.complex_human_instruction
            else ",\n    complex_human_instruction=None,  # trained without the prefix"
        )
        return (
            "import torch\n"
            "from diffusers import AutoencoderDC, SanaPipeline\n\n"
            f'base = "{cfg.model.pretrained_model_name_or_path}"\n'
            'vae = AutoencoderDC.from_pretrained(base, subfolder="vae", torch_dtype=torch.float32)  # DC-AE stays fp32\n'
            "pipe = SanaPipeline.from_pretrained(base, vae=vae, torch_dtype=torch.bfloat16)\n"
            f'pipe.load_lora_weights("{repo_or_dir}")\n'
            'pipe.to("cuda" if torch.cuda.is_available() else "cpu")\n'
            f"image = pipe(\n    {json.dumps(cfg.validation.validation_prompt or 'a photo')},\n"
            f"    height={cfg.data.resolution}, width={cfg.data.resolution},\n"
            f"    num_inference_steps={cfg.validation.validation_inference_steps}, guidance_scale={cfg.validation.validation_guidance_scale}{chi},\n"
            "    generator=torch.manual_seed(0),\n"
            ").images[0]\n"
            'image.save("sample.png")\n'
        )

    def card_settings(self, cfg) -> dict[str, Any]:
        """The weighting scheme, the instruction prefix and the caption length."""
        return {
            "weighting_scheme": cfg.family_options.weighting_scheme,
            "complex_human_instruction": cfg.family_options.complex_human_instruction,
            "max_sequence_length": max_sequence_length(cfg),
        }

    def base_model_license(self, cfg) -> str | None:
        """Efficient-Large-Model's checkpoints carry their own license ("other")."""
        return "other" if "Efficient-Large-Model" in cfg.model.pretrained_model_name_or_path else None
