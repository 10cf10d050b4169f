"""CogVideoX's validation videos: from the in-memory transformer (cached prompt embeddings, the checkpoint's own
sampler) and from the pipeline with the saved adapter, written as MP4 at the model's frame rate
(:class:`~dit_lora.kit.video_samples.VideoSamples`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dit_lora.contract.family import Components
from dit_lora.contract.spec import FamilyInfo
from dit_lora.families.cogvideox.encoders import CogVideoXEncoders, pipeline_class
from dit_lora.families.cogvideox.info import CogVideoXVideo
from dit_lora.kit.components import DiffusionSamples
from dit_lora.kit.sampling import checkpoint_sampler
from dit_lora.kit.video_samples import VideoSamples

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


def inference_scheduler(comps: Components):
    """The sampler of the checkpoint's scheduler config (``CogVideoXDDIMScheduler`` or ``CogVideoXDPMScheduler``)."""
    kept = comps.state.scheduler_config if comps.state is not None else None
    return checkpoint_sampler(dict(kept or comps.scheduler.config), "CogVideoXDDIMScheduler")


class CogVideoXSamples(VideoSamples, DiffusionSamples):
    """``FamilySpec.samples``: videos of the run's first bucket (text-to-video; ``i2v.py`` adds the image)."""

    def __init__(self, encoders: CogVideoXEncoders, info: FamilyInfo, video: CogVideoXVideo) -> None:
        super().__init__(video, encoders)
        self.info, self.video = info, video

    def video_size(self, cfg: TrainConfig) -> tuple[int, int, int]:
        """The run's first bucket."""
        return self.video.video_buckets(cfg)[0]

    def fps(self, cfg: TrainConfig) -> int:
        """The model's frame rate."""
        return self.video.model_info(cfg.model).fps

    def pipeline_class(self) -> Any:
        """The checkpoint's text-to-video or image-to-video pipeline."""
        return pipeline_class(self.info)

    def sampler(self, comps: Components) -> Any:
        """:func:`inference_scheduler`."""
        return inference_scheduler(comps)

    def reloaded_kwargs(self, pipe, cfg: TrainConfig, n: int, comps: Components | None) -> dict[str, Any]:
        """Prompts padded to the transformer's text length."""
        return {"max_sequence_length": pipe.transformer.config.max_text_seq_length}
