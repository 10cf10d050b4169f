"""CogVideoX's adapter: saved by the pipeline's own saver (``CogVideoXLoraLoaderMixin``, shared by both tasks),
loaded back into the pipeline, and the model card's usage snippet, rows and license."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from dit_lora.contract.spec import FamilyInfo
from dit_lora.core.quiet import dtype_kwarg
from dit_lora.data.frames import describe_buckets
from dit_lora.families.cogvideox.encoders import pipeline_class
from dit_lora.families.cogvideox.sizes import CogVideoXVideo
from dit_lora.modelfiles.pipeline_files import is_local
from dit_lora.output.adapter import attach_adapter
from dit_lora.output.video import snippet_write_video


class CogVideoXAdapter:
    """``FamilySpec.adapter``: the pipeline's ``save_lora_weights`` and ``load_lora_weights``."""

    def __init__(self, info: FamilyInfo) -> None:
        self.info = info

    def save_adapter(self, output_dir: Path, lora_state: dict, lora_config: dict) -> Path:
        """The transformer's LoRA layers and their PEFT config as diffusers' CogVideoX LoRA file."""
        pipeline_class(self.info).save_lora_weights(
            output_dir,
            transformer_lora_layers=lora_state,
            transformer_lora_adapter_metadata=lora_config,
            weight_name=self.info.adapter_weight_name,
            safe_serialization=True,
        )
        return Path(output_dir) / self.info.adapter_weight_name

    def load_pipeline_with_adapter(self, cfg, adapter_dir: Path, device: torch.device):
        """The base model's pipeline in the run's dtype with the saved adapter loaded by diffusers."""
        pipe = pipeline_class(self.info).from_pretrained(
            cfg.model.pretrained_model_name_or_path,
            revision=cfg.model.revision,
            variant=cfg.model.variant,
            **dtype_kwarg("diffusers", cfg.weight_dtype),
            use_safetensors=True,
        )
        attach_adapter(None, pipe, adapter_dir)  # CogVideoX fits no consumer before the adapter loads
        if cfg.family_options.enable_slicing:
            pipe.vae.enable_slicing()
        if cfg.family_options.enable_tiling:
            pipe.vae.enable_tiling()
        pipe.set_progress_bar_config(disable=True)
        return pipe.to(device)


class CogVideoXCard:
    """``FamilySpec.card``: the snippet (text-to-video; ``i2v.py`` adds the image), the video rows, the license."""

    def __init__(self, info: FamilyInfo, video: CogVideoXVideo) -> None:
        self.info, self.video = info, video

    def snippet_image(self, cfg) -> tuple[str, str, str]:
        """(extra import, lines before the call, argument) for the snippet's conditioning image (none here)."""
        return "", "", ""

    def usage_snippet(self, cfg, repo_or_dir: str) -> str:
        """The pipeline with the adapter loaded, one video of the run's first bucket, written as MP4."""
        frames, height, width = self.video.video_buckets(cfg)[0]
        extra_import, before, image_arg = self.snippet_image(cfg)
        tiling = (
            "pipe.vae.enable_tiling()  # decode in tiles: much less memory\n"
            if cfg.family_options.enable_tiling
            else ""
        )
        name = self.info.pipeline_class_name
        return (
            "import torch\n"
            f"from diffusers import {name}\n"
            + (f"from diffusers.utils import {extra_import.removeprefix(', ')}\n" if extra_import else "")
            + "\n"
            f"pipe = {name}.from_pretrained({json.dumps(cfg.model.pretrained_model_name_or_path)}, "
            "torch_dtype=torch.bfloat16)\n"
            f"pipe.load_lora_weights({json.dumps(repo_or_dir)})\n"
            f"{tiling}"
            'pipe.to("cuda" if torch.cuda.is_available() else "cpu")\n'
            f"{before}"
            f"video = pipe(\n    prompt={json.dumps(cfg.validation.validation_prompt or 'a video')},{image_arg}\n"
            f"    num_frames={frames}, height={height}, width={width},\n"
            f"    num_inference_steps={cfg.validation.validation_inference_steps}, guidance_scale={cfg.validation.validation_guidance_scale},\n"
            "    generator=torch.manual_seed(0),\n"
            ").frames[0]\n" + snippet_write_video(self.video.model_info(cfg).fps)
        )

    def card_settings(self, cfg) -> dict[str, Any]:
        """The buckets, the version, the loss settings, the text length, frame sampling and the VAE's modes."""
        options = cfg.family_options
        buckets = describe_buckets(self.video.video_buckets(cfg), automatic=not cfg.video.frame_buckets)
        info = self.video.model_info(cfg)
        return {
            "resolution": f"{buckets} (frames x height x width)",  # replaces the image row
            "model": info.describe(),
            "timestep_sampling": options.timestep_sampling,
            "loss_weight_cap": (
                options.loss_weight_cap if options.loss_weight_cap is not None else "none (1/(1 - alpha_bar_t))"
            ),
            "max_sequence_length": info.max_text_seq_length,
            "frame_sampling": cfg.video.frame_sampling,
            "vae": f"tiling {'on' if options.enable_tiling else 'off'}, "
            f"slicing {'on' if options.enable_slicing else 'off'}",
        }

    def base_model_license(self, cfg) -> str | None:
        """CogVideoX-2b is Apache-2.0; the 5B and 1.5 weights use the CogVideoX license ("other")."""
        name = cfg.model.pretrained_model_name_or_path
        org, _, repo = name.partition("/")
        if is_local(name) or org.lower() not in ("thudm", "zai-org") or "cogvideox" not in repo.lower():
            return None
        return "apache-2.0" if repo.lower().startswith("cogvideox-2b") else "other"
