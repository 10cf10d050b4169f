"""SANA-Video's validation videos: the in-memory model or the reloaded pipeline, written as mp4 at 16 fps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionSamples, vae_on
from dit_lora.families.diffusion.conditioning import kept_conditioning_image
from dit_lora.families.diffusion.sampling import checkpoint_sampler
from dit_lora.families.sanavideo.info import SanaVideoTask
from dit_lora.families.sanavideo.state import run_state
from dit_lora.output.video import write_video


def inference_scheduler(comps: Components):
    """The checkpoint's own sampler (DPM-Solver with flow sigmas, or flow-matching Euler), from its config."""
    return checkpoint_sampler(run_state(comps).scheduler_config, "FlowMatchEulerDiscreteScheduler")


def call_kwargs(task: SanaVideoTask, cfg: TrainConfig, generator: torch.Generator) -> dict[str, Any]:
    """The pipeline call's size (the first bucket, unbinned), steps, guidance and generator."""
    frames, height, width = task.video_buckets(cfg)[0]
    return {
        "frames": frames,
        "height": height,
        "width": width,
        "num_inference_steps": cfg.validation.validation_inference_steps,
        "guidance_scale": cfg.validation.validation_guidance_scale,
        "generator": generator,
        "output_type": "pil",
        "use_resolution_binning": False,  # the trained bucket, not the 480p table's nearest size
    }


class SanaVideoSamples(DiffusionSamples):
    """``FamilySpec.samples``: videos from the task's pipeline, written as mp4 at 16 fps."""

    def __init__(self, task: SanaVideoTask, encoders) -> None:
        super().__init__(encoders)
        self.task = task

    def image_kwargs(self, comps: Components | None, cfg: TrainConfig) -> dict[str, Any]:
        """Image-to-video: the run's conditioning image (the first clip's first frame or ``--validation_image``)."""
        if self.task.task != "i2v":
            return {}
        return {"image": kept_conditioning_image(self.task, cfg, run_state(comps) if comps is not None else None)}

    def generate(
        self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg: TrainConfig, seed: int
    ) -> list:
        """Validation videos from the in-memory transformer and the cached prompt embeddings."""
        device = next(p for p in model.parameters() if p.requires_grad).device
        with vae_on(comps, device) as vae:
            pipe = self.task.pipeline_class()(
                tokenizer=None, text_encoder=None, vae=vae, transformer=model, scheduler=inference_scheduler(comps)
            )
            pipe.set_progress_bar_config(disable=True)
            generator = torch.Generator(device=device).manual_seed(seed)
            # n copies of the prompt rather than num_videos_per_prompt: SanaImageToVideoPipeline sizes its
            # conditioning mask by the prompt count (diffusers 0.42.1), so more videos per prompt break it
            n = cfg.validation.num_validation_images
            embeds = {k: v.to(device).repeat(n, *([1] * (v.dim() - 1))) for k, v in cond.items()
                      if k in ("prompt_embeds", "prompt_attention_mask", "negative_prompt_embeds",
                               "negative_prompt_attention_mask")}  # fmt: skip
            with torch.no_grad():
                return list(
                    pipe(
                        **embeds,
                        negative_prompt=None,  # the cached empty caption's embeddings stand for it
                        **self.image_kwargs(comps, cfg),
                        **call_kwargs(self.task, cfg, generator),
                    ).frames
                )

    def generate_with_pipeline(
        self, pipe, prompt: str, cfg: TrainConfig, seed: int, num_images: int, comps: Components | None = None
    ) -> list:
        """Videos from the reloaded stock pipeline, with the instruction prefix only when the run trained with it."""
        generator = torch.Generator(device=pipe.transformer.device).manual_seed(seed)
        chi = {} if cfg.family_options.complex_human_instruction else {"complex_human_instruction": None}
        with torch.no_grad():
            return list(
                pipe(
                    prompt=[prompt] * num_images,  # not num_videos_per_prompt: see generate
                    **chi,
                    **self.image_kwargs(comps, cfg),
                    **call_kwargs(self.task, cfg, generator),
                ).frames
            )

    def save_sample(self, sample: Any, stem: Path, cfg: TrainConfig) -> Path:
        """A validation video (PIL frames) as ``stem.mp4`` at the model's rate."""
        return write_video(sample, Path(stem).with_suffix(".mp4"), fps=round(self.task.model_fps(cfg)))
