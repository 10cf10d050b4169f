"""Wan's validation videos: the in-memory model (the trained expert(s) in place) or the reloaded pipeline, written as mp4."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.diffusion.components import DiffusionSamples, vae_on
from dit_lora.families.diffusion.sampling import checkpoint_sampler
from dit_lora.families.wan.encoders import WanEncoders
from dit_lora.families.wan.experts import WanExperts
from dit_lora.families.wan.info import WanTask
from dit_lora.families.wan.state import run_state
from dit_lora.output.video import write_video


def _inference_scheduler(comps: Components):
    return checkpoint_sampler(run_state(comps).scheduler_config, "UniPCMultistepScheduler")


def call_kwargs(task: WanTask, cfg: TrainConfig, generator: torch.Generator) -> dict[str, Any]:
    """The pipeline call's size, steps, guidance and generator (the first bucket's size)."""
    frames, height, width = task.video_buckets(cfg)[0]
    return {
        "num_frames": frames,
        "height": height,
        "width": width,
        "num_inference_steps": cfg.validation.validation_inference_steps,
        "guidance_scale": cfg.validation.validation_guidance_scale,
        "generator": generator,
        "output_type": "pil",
    }


def _transformers(comps: Components, denoiser, stack: ExitStack) -> dict[str, Any]:
    """The pipeline's transformer arguments for the in-memory model.

    Both experts: ``transformer``/``transformer_2`` split at the checkpoint's boundary, each made resident on the
    device before its forward (hooks removed after). One trained expert of an A14B: that expert alone for every
    step (the other is not loaded; the start notes say so).
    """
    state = run_state(comps)
    if isinstance(denoiser, WanExperts):
        for name in ("high", "low"):
            hook = denoiser.expert(name).register_forward_pre_hook(lambda *_, n=name: denoiser.activate(n) and None)
            stack.callback(hook.remove)
        return {"transformer": denoiser.high, "transformer_2": denoiser.low, "boundary_ratio": state.boundary_ratio}
    if state.expert:  # one trained A14B expert: it runs both stages (the pipeline keeps its boundary,
        # so an I2V-A14B pipeline does not look for the CLIP encoder the A14B models do not have)
        return {"transformer": denoiser, "transformer_2": denoiser, "boundary_ratio": state.boundary_ratio}
    return {"transformer": denoiser}


def generate_validation(
    samples: WanSamples, comps: Components, denoiser, cond: dict, cfg: TrainConfig, seed: int
) -> list:
    """Validation videos from the in-memory model: the pipeline with the cached prompt embeddings."""
    device = next(p for p in denoiser.parameters() if p.requires_grad).device
    with ExitStack() as stack:
        vae = stack.enter_context(vae_on(comps, device))
        pipe = samples.task.pipeline_class()(
            tokenizer=None,
            text_encoder=None,
            vae=vae,
            scheduler=_inference_scheduler(comps),
            **_transformers(comps, denoiser, stack),
            expand_timesteps=bool(run_state(comps).expand_timesteps),
        )
        pipe.set_progress_bar_config(disable=True)
        samples.fit_validation_pipeline(pipe, comps)
        n = cfg.validation.num_validation_images
        generator = torch.Generator(device=device).manual_seed(seed)
        with torch.no_grad():
            videos = pipe(
                prompt_embeds=cond["prompt_embeds"].to(device).repeat(n, 1, 1),
                negative_prompt_embeds=cond["negative_prompt_embeds"].to(device).repeat(n, 1, 1),
                **samples.image_call_kwargs(comps, cond, cfg, n),
                **call_kwargs(samples.task, cfg, generator),
            ).frames
    return list(videos)


def generate_from_pipeline(
    samples: WanSamples,
    pipe,
    prompt: str,
    cfg: TrainConfig,
    seed: int,
    num_images: int,
    comps: Components | None = None,
) -> list:
    """Videos from the reloaded consumer pipeline (both experts of an A14B, with the adapter(s) loaded)."""
    device = (pipe.transformer or pipe.transformer_2).device
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        return list(
            pipe(
                prompt=[prompt] * num_images,
                **samples.image_call_kwargs(comps, None, cfg, num_images),
                **call_kwargs(samples.task, cfg, generator),
            ).frames
        )


class WanSamples(DiffusionSamples):
    """``FamilySpec.samples``: videos from the Wan pipeline, written as mp4 at the checkpoint's frame rate."""

    def __init__(self, task: WanTask, encoders: WanEncoders) -> None:
        super().__init__(encoders)
        self.task = task

    def generate(
        self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg: TrainConfig, seed: int
    ) -> list:
        """:func:`generate_validation`."""
        return generate_validation(self, comps, model, cond, cfg, seed)

    def generate_with_pipeline(
        self, pipe, prompt: str, cfg: TrainConfig, seed: int, num_images: int, comps: Components | None = None
    ) -> list:
        """:func:`generate_from_pipeline`."""
        return generate_from_pipeline(self, pipe, prompt, cfg, seed, num_images, comps)

    def save_sample(self, sample: Any, stem: Path, cfg: TrainConfig) -> Path:
        """A validation video (list of PIL frames) as ``stem.mp4`` at the checkpoint's frame rate."""
        return write_video(sample, Path(stem).with_suffix(".mp4"), fps=self.task.info(cfg).fps)

    def image_call_kwargs(self, comps: Components | None, cond: dict | None, cfg: TrainConfig, n: int) -> dict:
        """The pipeline call's image arguments (text-to-video: none)."""
        return {}

    def fit_validation_pipeline(self, pipe, comps: Components) -> None:
        """Adapt the in-memory validation pipeline to what the run still holds (image-to-video: the cached CLIP
        embedding stands in for the released image encoder); nothing for text-to-video."""
