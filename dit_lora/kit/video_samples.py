"""The validation videos every video family makes the same way: :class:`VideoSamples`.

From the in-memory transformer: the family's pipeline without text encoders (the cached prompt embeddings, repeated
once per video: the pipelines make one video per prompt), the VAE moved in to decode, the checkpoint's sampler, a
seeded generator on the model's device, under ``no_grad``. From the reloaded pipeline: the prompt, once per video.
Both at the run's first bucket and validation settings; each video written as mp4 at the family's frame rate. A
family's samples are ``class WanSamples(VideoSamples, DiffusionSamples)``, built with its task (a
:class:`~.info_cache.VideoTask`, whose pipeline class, first bucket and rate they take) and encoders; a family states
its sampler and the call's own arguments (the hooks below).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.contract.family import Components
from dit_lora.kit.components import vae_on
from dit_lora.output.video import write_video

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


class VideoSamples:
    """``FamilySpec.samples`` of a video family, a mixin before the kit's
    :class:`~dit_lora.kit.components.DiffusionSamples` (which holds the encoders and picks the sampler): the
    pipeline's videos (lists of PIL frames) of the first bucket."""

    #: the pipelines' keyword for the frame count (SANA-Video's pipelines say ``frames``)
    frames_keyword = "num_frames"
    #: the cached conditioning the in-memory pipeline is given, each repeated once per video
    cached_keys: tuple[str, ...] = ("prompt_embeds", "negative_prompt_embeds")
    #: the call's arguments besides the size, steps, guidance and generator
    fixed_kwargs: dict[str, Any] = {"output_type": "pil"}
    #: the in-memory model's device is its first trained parameter's (not its first parameter's, which a swapped
    #: or offloaded block may keep in host memory)
    device_from_trained = False
    #: the in-memory pipeline's scheduler (:class:`~dit_lora.kit.components.DiffusionSamples`' or the family's)
    sampler: Callable[[Components], Any]

    def __init__(self, task: Any, *args: Any, **kwargs: Any) -> None:
        """``task``: the family's video task (its buckets, rate and pipeline); ``args``, ``kwargs``: the kit base's
        (the encoders)."""
        super().__init__(*args, **kwargs)
        self.task = task

    def video_size(self, cfg: TrainConfig) -> tuple[int, int, int]:
        """``(frames, height, width)`` of the validation videos: the run's first bucket."""
        return self.task.video_buckets(cfg)[0]

    def fps(self, cfg: TrainConfig) -> int:
        """The frame rate the videos are written at: the checkpoint's, in whole frames per second."""
        return round(self.task.model_fps(cfg.model))

    def pipeline_class(self) -> Any:
        """The task's diffusers pipeline class (imported on use: diffusers' pipelines import slowly)."""
        return self.task.pipeline_class()

    def call_kwargs(
        self, cfg: TrainConfig, generator: torch.Generator, num_videos: int, comps: Components | None = None
    ) -> dict[str, Any]:
        """The pipeline call's size, steps, guidance and generator (shared by both ways of sampling)."""
        frames, height, width = self.video_size(cfg)
        return {
            self.frames_keyword: frames,
            "height": height,
            "width": width,
            "num_inference_steps": cfg.validation.validation_inference_steps,
            "guidance_scale": cfg.validation.validation_guidance_scale,
            "generator": generator,
            **self.fixed_kwargs,
        }

    def pipeline_parts(self, comps: Components, model, stack: ExitStack) -> dict[str, Any]:
        """The in-memory pipeline's transformer argument(s); ``stack`` undoes anything set up for them."""
        return {"transformer": model}

    def fit_validation_pipeline(self, pipe, comps: Components) -> None:
        """Adapt the in-memory pipeline to what the run still holds (nothing here)."""

    def in_memory_kwargs(self, comps: Components, cond: dict[str, Any], cfg: TrainConfig, n: int) -> dict[str, Any]:
        """The in-memory call's own arguments besides the cached embeddings (none here)."""
        return {}

    def reloaded_kwargs(self, pipe, cfg: TrainConfig, n: int, comps: Components | None) -> dict[str, Any]:
        """The reloaded pipeline's own arguments besides the prompts (none here)."""
        return {}

    def pipeline_device(self, pipe) -> torch.device:
        """The reloaded pipeline's device: its transformer's."""
        return pipe.transformer.device

    def generate(
        self, comps: Components, model: torch.nn.Module, cond: dict[str, Any], cfg: TrainConfig, seed: int
    ) -> list:
        """``--num_validation_images`` videos from the in-memory model and the cached prompt embeddings."""
        params = iter(model.parameters())
        if self.device_from_trained:
            params = (p for p in params if p.requires_grad)
        device = next(params).device
        with ExitStack() as stack:
            vae = stack.enter_context(vae_on(comps, device))
            pipe = self.pipeline_class()(
                tokenizer=None,
                text_encoder=None,
                vae=vae,
                scheduler=self.sampler(comps),
                **self.pipeline_parts(comps, model, stack),
            )
            pipe.set_progress_bar_config(disable=True)
            self.fit_validation_pipeline(pipe, comps)
            n = cfg.validation.num_validation_images
            embeds = {
                k: v.to(device).repeat(n, *([1] * (v.dim() - 1))) for k, v in cond.items() if k in self.cached_keys
            }
            generator = torch.Generator(device=device).manual_seed(seed)
            with torch.no_grad():
                videos = pipe(
                    **embeds, **self.in_memory_kwargs(comps, cond, cfg, n), **self.call_kwargs(cfg, generator, n, comps)
                ).frames
        return list(videos)

    def generate_with_pipeline(
        self, pipe, prompt: str, cfg: TrainConfig, seed: int, num_images: int, comps=None
    ) -> list:
        """``num_images`` videos of ``prompt`` from the reloaded pipeline (one prompt per video, not
        ``num_videos_per_prompt``: SanaImageToVideoPipeline sizes its conditioning mask by the prompt count)."""
        generator = torch.Generator(device=self.pipeline_device(pipe)).manual_seed(seed)
        with torch.no_grad():
            return list(
                pipe(
                    prompt=[prompt] * num_images,
                    **self.reloaded_kwargs(pipe, cfg, num_images, comps),
                    **self.call_kwargs(cfg, generator, num_images, comps),
                ).frames
            )

    def save_sample(self, sample: Any, stem: Path, cfg: TrainConfig) -> Path:
        """A validation video (list of PIL frames) as ``stem.mp4`` at :meth:`fps`."""
        return write_video(sample, Path(stem).with_suffix(".mp4"), fps=self.fps(cfg))
