"""SANA-Video's validation videos: the in-memory model or the reloaded pipeline, written as mp4 at 16 fps
(:class:`~dit_lora.families.diffusion.video_samples.VideoSamples`)."""

from __future__ import annotations

from typing import Any

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.diffusion.conditioning import kept_conditioning_image
from dit_lora.families.diffusion.sampling import checkpoint_sampler
from dit_lora.families.diffusion.video_samples import VideoSamples
from dit_lora.families.sanavideo.info import SanaVideoTask
from dit_lora.families.sanavideo.state import run_state


def inference_scheduler(comps: Components):
    """The checkpoint's own sampler (DPM-Solver with flow sigmas, or flow-matching Euler), from its config."""
    return checkpoint_sampler(run_state(comps).scheduler_config, "FlowMatchEulerDiscreteScheduler")


class SanaVideoSamples(VideoSamples):
    """``FamilySpec.samples``: videos from the task's pipeline, written as mp4 at 16 fps."""

    frames_keyword = "frames"
    cached_keys = ("prompt_embeds", "prompt_attention_mask", "negative_prompt_embeds", "negative_prompt_attention_mask")
    # the trained bucket, not the 480p table's nearest size
    fixed_kwargs = {"output_type": "pil", "use_resolution_binning": False}
    device_from_trained = True

    def __init__(self, task: SanaVideoTask, encoders) -> None:
        super().__init__(encoders)
        self.task = task

    def video_size(self, cfg: TrainConfig) -> tuple[int, int, int]:
        """The run's first bucket (unbinned)."""
        return self.task.video_buckets(cfg)[0]

    def fps(self, cfg: TrainConfig) -> int:
        """The model's rate, in whole frames per second."""
        return round(self.task.model_fps(cfg))

    def pipeline_class(self) -> Any:
        """The task's pipeline."""
        return self.task.pipeline_class()

    def sampler(self, comps: Components) -> Any:
        """:func:`inference_scheduler`."""
        return inference_scheduler(comps)

    def image_kwargs(self, comps: Components | None, cfg: TrainConfig) -> dict[str, Any]:
        """Image-to-video: the run's conditioning image (the first clip's first frame or ``--validation_image``)."""
        if self.task.task != "i2v":
            return {}
        return {"image": kept_conditioning_image(self.task, cfg, run_state(comps) if comps is not None else None)}

    def in_memory_kwargs(self, comps: Components, cond: dict[str, Any], cfg: TrainConfig, n: int) -> dict[str, Any]:
        """The image; no negative prompt (the cached empty caption's embeddings stand for it)."""
        return {"negative_prompt": None, **self.image_kwargs(comps, cfg)}

    def reloaded_kwargs(self, pipe, cfg: TrainConfig, n: int, comps: Components | None) -> dict[str, Any]:
        """The image, and the instruction prefix only when the run trained with it."""
        chi = {} if cfg.family_options.complex_human_instruction else {"complex_human_instruction": None}
        return {**chi, **self.image_kwargs(comps, cfg)}
