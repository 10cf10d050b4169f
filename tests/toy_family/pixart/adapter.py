"""The toy PixArt family's adapter: saved in PEFT's format (``PixArtAlphaPipeline`` has no LoRA loader and its
transformer no PEFT mixin), loaded back by ``dit_lora``'s PEFT loader into a transformer given PEFT's methods, and
the model card's snippet, rows and license."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dit_lora.contract.spec import FamilyInfo
from dit_lora.families.diffusion.peft_capable import make_peft_capable
from dit_lora.output.adapter import adapter_folder, attach_adapter

from .options import text_length


class PixArtFitting:
    """``FamilySpec.fitting``: the consumer's transformer gets PEFT's methods before the adapter loads."""

    def prepare_pipeline_for_adapter(self, pipe, adapter_dir: Path) -> None:
        """Give the pipeline's transformer PEFT's methods, as training did."""
        make_peft_capable(pipe.transformer)


class PixArtAdapter:
    """``FamilySpec.adapter``: PEFT's files, loaded back into a fresh ``PixArtAlphaPipeline``."""

    def __init__(self, info: FamilyInfo, fitting: PixArtFitting) -> None:
        self.info, self.fitting = info, fitting

    def save_adapter(self, output_dir: Path, lora_state: dict[str, torch.Tensor], lora_config: dict) -> Path:
        """PEFT format (``adapter_model.safetensors`` + ``adapter_config.json``)."""
        from dit_lora.output.adapter import save_peft_adapter

        return save_peft_adapter(Path(output_dir), lora_state, lora_config, None)

    def load_pipeline_with_adapter(self, cfg, adapter_dir: Path, device: torch.device):
        """A fresh ``PixArtAlphaPipeline`` from the base model with the saved adapter loaded by the PEFT loader."""
        from diffusers import AutoencoderKL, PixArtAlphaPipeline

        path = cfg.model.pretrained_model_name_or_path
        vae = AutoencoderKL.from_pretrained(path, subfolder="vae", revision=cfg.model.revision, torch_dtype=torch.float32,
                                            use_safetensors=True)
        pipe = PixArtAlphaPipeline.from_pretrained(path, vae=vae, revision=cfg.model.revision, variant=cfg.model.variant,
                                                   torch_dtype=cfg.weight_dtype, use_safetensors=True)
        # The spec's fitting first (attach_adapter takes a spec, which a component cannot hold), then the files
        self.fitting.prepare_pipeline_for_adapter(pipe, adapter_folder(adapter_dir))
        attach_adapter(None, pipe, adapter_dir)
        pipe.set_progress_bar_config(disable=True)
        return pipe.to(device)


class PixArtCard:
    """``FamilySpec.card``: the model card's snippet (``dit_lora.load_adapter``), the family's rows, no license."""

    def usage_snippet(self, cfg, repo_or_dir: str) -> str:
        """Python for the model card: load the pipeline, the adapter with ``dit_lora.load_adapter``, generate."""
        return (
            "import torch\nfrom diffusers import PixArtAlphaPipeline\n"
            "from dit_lora import load_adapter  # PixArtAlphaPipeline has no load_lora_weights\n\n"
            f"pipe = PixArtAlphaPipeline.from_pretrained(\"{cfg.model.pretrained_model_name_or_path}\")\n"
            f"load_adapter(pipe, \"{repo_or_dir}\")\n"
            f"image = pipe({(cfg.validation.validation_prompt or 'a photo')!r}, height={cfg.data.resolution}, width={cfg.data.resolution}, "
            "use_resolution_binning=False).images[0]\n"
        )

    def card_settings(self, cfg) -> dict[str, Any]:
        """The toy family's row of the model card's settings table."""
        return {"pixart_text_length": text_length(cfg), "loss": "epsilon (DDPM)"}

    def base_model_license(self, cfg) -> str | None:
        """Unknown for a toy model."""
        return None
