"""HunyuanVideo 1.5's validation videos: the in-memory model or the reloaded pipeline, written as mp4 at 24 fps
(:class:`~dit_lora.kit.video_samples.VideoSamples`). The pipelines take their guidance scale from their
``guider`` component, not from the call: the run's ``--validation_guidance_scale`` is a new ``ClassifierFreeGuidance``;
the image-to-video pipeline sizes its video from the image and the transformer's ``target_size``."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import torch

from dit_lora.config import TrainConfig
from dit_lora.config.schema import ValidationOptions
from dit_lora.contract.family import Components
from dit_lora.families.hunyuanvideo15.encoders import padded_prompt
from dit_lora.families.hunyuanvideo15.state import run_state
from dit_lora.kit.components import DiffusionSamples
from dit_lora.kit.conditioning import kept_conditioning_image
from dit_lora.kit.video_samples import VideoSamples


def guider(validation: ValidationOptions) -> Any:
    """Classifier-free guidance at ``--validation_guidance_scale`` (``validation``: the run's ``cfg.validation``)."""
    from diffusers.guiders import ClassifierFreeGuidance

    return ClassifierFreeGuidance(guidance_scale=validation.validation_guidance_scale)


class HunyuanVideo15Samples(VideoSamples, DiffusionSamples):
    """``FamilySpec.samples``: videos from the task's pipeline at its first bucket (image-to-video: the pipeline's
    size for the image), written as mp4 at 24 fps."""

    cached_keys = ()  # the ragged captions are padded back for the call (in_memory_kwargs)
    fixed_kwargs = {"output_type": "pil"}
    fallback_sampler = "FlowMatchEulerDiscreteScheduler"

    def call_kwargs(
        self, cfg: TrainConfig, generator: torch.Generator, num_videos: int, comps: Components | None = None
    ) -> dict[str, Any]:
        """The kit's, without ``guidance_scale`` (the guider's) and, for image-to-video, without the size."""
        kwargs = super().call_kwargs(cfg, generator, num_videos, comps)
        kwargs.pop("guidance_scale")
        if self.task.task == "i2v":
            kwargs.pop("height"), kwargs.pop("width")
        return kwargs

    def pipeline_parts(self, comps: Components, model, stack: ExitStack) -> dict[str, Any]:
        """The trained transformer, no ByT5 (the cached captions stand for it), the run's guider; image-to-video:
        SigLIP and its processor."""
        image = {k: comps.encoders[k] for k in ("image_encoder", "feature_extractor") if self.task.task == "i2v"}
        return {"transformer": model, "text_encoder_2": None, "tokenizer_2": None, "guider": self.guider, **image}

    def generate(self, comps: Components, model, cond: dict[str, Any], cfg: TrainConfig, seed: int) -> list:
        """The kit's, with the run's guider."""
        self.guider = guider(cfg.validation)
        return super().generate(comps, model, cond, cfg, seed)

    def image_kwargs(self, comps: Components | None, cfg: TrainConfig) -> dict[str, Any]:
        """Image-to-video: the run's conditioning image (the first clip's first frame or ``--validation_image``)."""
        if self.task.task != "i2v":
            return {}
        return {"image": kept_conditioning_image(self.task, cfg, run_state(comps) if comps is not None else None)}

    def in_memory_kwargs(self, comps: Components, cond: dict[str, Any], cfg: TrainConfig, n: int) -> dict[str, Any]:
        """The cached captions padded back as the pipeline takes them (and the empty negative's), once per video."""
        embeds = {**padded_prompt(cond), **padded_prompt(cond, "negative_")}
        device = next(p for p in comps.model.parameters() if p.requires_grad).device
        repeated = {k: v.to(device).repeat(n, *([1] * (v.dim() - 1))) for k, v in embeds.items()}
        return {**repeated, **self.image_kwargs(comps, cfg)}

    def reloaded_kwargs(self, pipe, cfg: TrainConfig, n: int, comps: Components | None) -> dict[str, Any]:
        """The image; the pipeline's guider set to the run's scale (it is a component, not a call argument)."""
        pipe.guider = guider(cfg.validation)
        return self.image_kwargs(comps, cfg)
