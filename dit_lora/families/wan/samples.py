"""Wan's validation videos: the in-memory model (the trained expert(s) in place) or the reloaded pipeline, written as
mp4 (:class:`~dit_lora.kit.video_samples.VideoSamples`)."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

from dit_lora.config import TrainConfig
from dit_lora.contract.family import Components
from dit_lora.families.wan.experts import WanExperts
from dit_lora.families.wan.info import WanTask
from dit_lora.families.wan.state import run_state
from dit_lora.kit.components import DiffusionSamples
from dit_lora.kit.video_samples import VideoSamples


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


class WanSamples(VideoSamples, DiffusionSamples):
    """``FamilySpec.samples``: videos from the Wan pipeline, written as mp4 at the checkpoint's frame rate."""

    device_from_trained = True
    fallback_sampler = "UniPCMultistepScheduler"  # the checkpoint's sampler, UniPC when its config names none
    task: WanTask

    def pipeline_parts(self, comps: Components, model, stack: ExitStack) -> dict[str, Any]:
        """The trained expert(s) (:func:`_transformers`) and the checkpoint's ``expand_timesteps``."""
        return {**_transformers(comps, model, stack), "expand_timesteps": bool(run_state(comps).expand_timesteps)}

    def in_memory_kwargs(self, comps: Components, cond: dict[str, Any], cfg: TrainConfig, n: int) -> dict[str, Any]:
        """:meth:`image_call_kwargs` of the cached conditioning."""
        return self.image_call_kwargs(comps, cond, cfg, n)

    def reloaded_kwargs(self, pipe, cfg: TrainConfig, n: int, comps: Components | None) -> dict[str, Any]:
        """:meth:`image_call_kwargs` without cached conditioning."""
        return self.image_call_kwargs(comps, None, cfg, n)

    def pipeline_device(self, pipe):
        """The reloaded pipeline's first transformer's device (an A14B's may hold only ``transformer_2``)."""
        return (pipe.transformer or pipe.transformer_2).device

    def image_call_kwargs(self, comps: Components | None, cond: dict | None, cfg: TrainConfig, n: int) -> dict:
        """The pipeline call's image arguments (text-to-video: none)."""
        return {}

    def fit_validation_pipeline(self, pipe, comps: Components) -> None:
        """Adapt the in-memory validation pipeline to what the run still holds (image-to-video: the cached CLIP
        embedding stands in for the released image encoder); nothing for text-to-video."""
