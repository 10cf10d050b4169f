"""CogVideoX's validation videos: from the in-memory transformer (cached prompt embeddings, the checkpoint's own
sampler) and from the pipeline with the saved adapter, written as MP4 at the model's frame rate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dit_lora.contract.family import Components
from dit_lora.contract.spec import FamilyInfo
from dit_lora.families.cogvideox.encoders import CogVideoXEncoders, pipeline_class
from dit_lora.families.cogvideox.info import CogVideoXVideo
from dit_lora.families.diffusion.components import DiffusionSamples, vae_on
from dit_lora.families.diffusion.sampling import checkpoint_sampler
from dit_lora.output.video import write_video


def inference_scheduler(comps: Components):
    """The sampler of the checkpoint's scheduler config (``CogVideoXDDIMScheduler`` or ``CogVideoXDPMScheduler``)."""
    kept = comps.state.scheduler_config if comps.state is not None else None
    return checkpoint_sampler(dict(kept or comps.scheduler.config), "CogVideoXDDIMScheduler")


class CogVideoXSamples(DiffusionSamples):
    """``FamilySpec.samples``: videos of the run's first bucket (text-to-video; ``i2v.py`` adds the image)."""

    def __init__(self, encoders: CogVideoXEncoders, info: FamilyInfo, video: CogVideoXVideo) -> None:
        super().__init__(encoders)
        self.info, self.video = info, video

    def call_kwargs(
        self, cfg, generator: torch.Generator, num_videos: int, comps: Components | None = None
    ) -> dict[str, Any]:
        """The pipeline call's size, steps, guidance and generator (shared by both ways of sampling)."""
        frames, height, width = self.video.video_buckets(cfg)[0]
        return {
            "num_frames": frames,
            "height": height,
            "width": width,
            "num_inference_steps": cfg.validation.validation_inference_steps,
            "guidance_scale": cfg.validation.validation_guidance_scale,
            "generator": generator,
            "output_type": "pil",
        }

    def generate(self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg, seed: int) -> list:
        """Videos (lists of PIL frames) from the in-memory transformer (VAE moved in to decode)."""
        device = next(model.parameters()).device
        with vae_on(comps, device) as vae:
            pipe = pipeline_class(self.info)(
                tokenizer=None, text_encoder=None, vae=vae, transformer=model, scheduler=inference_scheduler(comps)
            )
            pipe.set_progress_bar_config(disable=True)
            n = cfg.validation.num_validation_images  # the pipelines make one video per prompt: repeat the embeddings
            generator = torch.Generator(device=device).manual_seed(seed)
            with torch.no_grad():
                videos = pipe(
                    prompt_embeds=cond["prompt_embeds"].to(device).repeat(n, 1, 1),
                    negative_prompt_embeds=cond["negative_prompt_embeds"].to(device).repeat(n, 1, 1),
                    **self.call_kwargs(cfg, generator, n, comps),
                ).frames
        return list(videos)

    def generate_with_pipeline(self, pipe, prompt: str, cfg, seed: int, num_images: int, comps=None) -> list:
        """Videos from the reloaded pipeline, prompts padded to the transformer's text length."""
        generator = torch.Generator(device=pipe.transformer.device).manual_seed(seed)
        with torch.no_grad():
            return list(
                pipe(
                    prompt=[prompt] * num_images,
                    max_sequence_length=pipe.transformer.config.max_text_seq_length,
                    **self.call_kwargs(cfg, generator, num_images, comps),
                ).frames
            )

    def save_sample(self, sample: Any, stem: Path, cfg) -> Path:
        """A validation video (list of PIL frames) as ``stem.mp4`` at the model's frame rate."""
        return write_video(sample, Path(stem).with_suffix(".mp4"), fps=self.video.model_info(cfg).fps)
