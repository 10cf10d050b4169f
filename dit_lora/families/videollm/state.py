"""What one video-LLM run decides, and the two components that decide and read it.

:class:`VideoLLMState` is the run's ``comps.state`` (the family spec stays immutable): the model's processing, put
there when the components load; the loss function and the validation clip, chosen by :class:`VideoLLMSetup` (the
spec's ``setup``) once the model is loaded and once the samples are screened. :class:`VideoLLMLoss` (the spec's
``loss``) reads them every step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.families.videollm.architecture import VideoLLMSpec
from dit_lora.families.videollm.liger import apply_liger, plain_loss
from dit_lora.families.videollm.processing import VideoQAProcessing

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: ``loss_fn(arch, model, inputs, labels)``: the answer-token loss (:mod:`dit_lora.families.videollm.liger`)
LossFn = Callable[[VideoLLMSpec, torch.nn.Module, dict, torch.Tensor], torch.Tensor]


@dataclass
class VideoLLMState:
    """A video-LLM run's own decisions (``comps.state``), made once and read by the steps and the samples."""

    #: the loaded model's tokenizer, frame preprocessing and config (what the dataset and validation use)
    processing: VideoQAProcessing
    #: the answer-token loss :meth:`VideoLLMSetup.configure` chose (None until then: the plain loss)
    loss_fn: LossFn | None = None
    #: the clip validation asks about (:meth:`VideoLLMSetup.inspect_samples`: --validation_video or the first
    #: training clip; None until the samples are screened)
    validation_video: Path | None = None


def run_state(comps) -> VideoLLMState | None:
    """``comps.state`` when it is a video-LLM run's (None for components a test or the planner built by hand)."""
    state = getattr(comps, "state", None)
    return state if isinstance(state, VideoLLMState) else None


def run_processing(comps) -> VideoQAProcessing:
    """The run's processing (``comps.state.processing``); components without a video-LLM run state are refused."""
    state = run_state(comps)
    if state is None:
        raise ValueError(
            "these components have no video-LLM run state (comps.state), which holds the model's processing: "
            "the family's load_components puts it there"
        )
    return state.processing


@dataclass(frozen=True)
class VideoLLMSetup:
    """``FamilySpec.setup``: the loss once the model is loaded, the validation clip once the samples are screened."""

    arch: VideoLLMSpec

    def configure(self, comps, cfg: TrainConfig) -> None:
        """The run's loss function in ``comps.state.loss_fn``: Liger's fused one with --use_liger_kernel (where it
        can run; otherwise a note and the plain loss). The planner's components (no run state: the traced loss is
        :meth:`~dit_lora.families.videollm.plan.VideoLLMPlan.plan_loss`) get the same note and keep nothing."""
        loss_fn = plain_loss
        if cfg.family_options.use_liger_kernel:
            loss_fn = apply_liger(self.arch, comps.model, print) or plain_loss
        state = run_state(comps)
        if state is not None:
            state.loss_fn = loss_fn

    def inspect_samples(self, comps, cfg: TrainConfig, samples: list) -> None:
        """The clip validation asks about: ``--validation_video``, else the first screened training clip."""
        state = run_state(comps)
        if samples and state is not None:
            chosen = cfg.family_options.validation_video
            state.validation_video = Path(chosen) if chosen else samples[0].video


@dataclass(frozen=True)
class VideoLLMLoss:
    """``FamilySpec.loss``: a padded batch on the device, and the loss over its answer tokens."""

    arch: VideoLLMSpec

    def prepare_batch(self, comps, batch: dict[str, Any], device, cached: bool) -> dict[str, Any]:
        """The collated batch's tensors on ``device`` (nothing is cached: the frames go through the vision tower)."""
        return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}

    def compute_loss(
        self, comps, model: torch.nn.Module, batch: dict[str, Any], generator: torch.Generator, cfg: TrainConfig
    ) -> torch.Tensor:
        """The mean cross-entropy of the answer tokens, by the loss the run's setup chose."""
        inputs = {k: v for k, v in batch.items() if k not in ("labels", "sample_index")}
        state = run_state(comps)
        loss_fn = (state.loss_fn if state is not None else None) or plain_loss
        return loss_fn(self.arch, model, self.arch.step_inputs(inputs, comps.model.config), batch["labels"])
