"""SANA-Video's validation videos: the in-memory model or the reloaded pipeline, written as mp4 at 16 fps
(:class:`~dit_lora.kit.video_samples.VideoSamples`)."""

from __future__ import annotations

from typing import Any

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.sanavideo.encoders import max_sequence_length
from dit_lora.families.sanavideo.state import run_state
from dit_lora.kit.components import DiffusionSamples
from dit_lora.kit.conditioning import kept_conditioning_image
from dit_lora.kit.video_samples import VideoSamples


class SanaVideoSamples(VideoSamples, DiffusionSamples):
    """``FamilySpec.samples``: videos from the task's pipeline at its first bucket (unbinned), written as mp4 at
    16 fps."""

    frames_keyword = "frames"
    cached_keys = ("prompt_embeds", "prompt_attention_mask", "negative_prompt_embeds", "negative_prompt_attention_mask")
    # the trained bucket, not the 480p table's nearest size
    fixed_kwargs = {"output_type": "pil", "use_resolution_binning": False}
    device_from_trained = True
    # the checkpoint's own sampler (DPM-Solver with flow sigmas, or flow-matching Euler), from its config
    fallback_sampler = "FlowMatchEulerDiscreteScheduler"

    def image_kwargs(self, comps: Components | None, cfg: TrainConfig) -> dict[str, Any]:
        """Image-to-video: the run's conditioning image (the first clip's first frame or ``--validation_image``)."""
        if self.task.task != "i2v":
            return {}
        return {"image": kept_conditioning_image(self.task, cfg, run_state(comps) if comps is not None else None)}

    def in_memory_kwargs(self, comps: Components, cond: dict[str, Any], cfg: TrainConfig, n: int) -> dict[str, Any]:
        """The image; no negative prompt (the cached empty caption's embeddings stand for it)."""
        return {"negative_prompt": None, **self.image_kwargs(comps, cfg)}

    def reloaded_kwargs(self, pipe, cfg: TrainConfig, n: int, comps: Components | None) -> dict[str, Any]:
        """The image, the instruction prefix only when the run trained with it, and the run's caption length."""
        chi = {} if cfg.family_options.complex_human_instruction else {"complex_human_instruction": None}
        return {**chi, "max_sequence_length": max_sequence_length(cfg.data), **self.image_kwargs(comps, cfg)}
