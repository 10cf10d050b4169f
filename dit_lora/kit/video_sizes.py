"""The clips a video family trains and plans: :func:`clip_buckets` (the run's ``(frames, height, width)`` buckets of a
transformer whose positions are computed per input size), :class:`ClipData` (clips decoded to them),
:func:`clip_batches` (the planner's clip micro-batches, :class:`ClipPlan`'s: a mixin, ``class WanPlan(ClipPlan,
DiffusionPlan)``) and :class:`OneClipPerStep` (the
batch size every video family defaults to)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dit_lora.contract.capabilities import VideoFrames
from dit_lora.core.errors import UserError
from dit_lora.data.data_sets import distinct, set_configs
from dit_lora.data.frames import automatic_buckets, check_num_frames, most_tokens, resolution_buckets
from dit_lora.data.prepare_cache import cache_root_for
from dit_lora.data.video_prepare import VideoMedia
from dit_lora.kit.components import DiffusionData

if TYPE_CHECKING:
    from dit_lora.config.schema import FamilyOptions, ModelOptions, TrainConfig, TrainingOptions, VideoOptions


def clip_buckets(
    cfg: TrainConfig, trained: tuple[int, int, int], size_multiple: int, temporal: int, model: str, stride: str
) -> list[tuple[int, int, int]]:
    """``--frame_buckets`` (only those), else automatic aspect buckets around ``--max_num_frames`` x ``--height`` x
    ``--width`` or the ``trained`` size, that size first (:func:`~dit_lora.data.frames.automatic_buckets`: a RoPE
    computed per input size runs any multiple of ``size_multiple``). ``temporal``: the VAE's temporal compression
    (the frame rule); a height or width off the multiple is refused naming ``model`` and the ``stride``'s reason."""
    if cfg.video.frame_buckets:
        return resolution_buckets(
            cfg.video.frame_buckets, spatial_multiple=size_multiple, temporal_compression=temporal
        )
    frames0, height0, width0 = trained
    frames = cfg.video.max_num_frames or frames0
    named = "--max_num_frames" if cfg.video.max_num_frames else "the default frame count"
    check_num_frames(frames, flag=named, temporal_compression=temporal)
    height, width = cfg.video.height or height0, cfg.video.width or width0
    for flag, value in (("--height", height), ("--width", width)):
        if value % size_multiple:
            fixed = max(size_multiple, round(value / size_multiple) * size_multiple)
            raise UserError(
                f"{flag} {value} must be a multiple of {size_multiple} for this {model} checkpoint ({stride}); "
                f"use {fixed}."
            )
    return automatic_buckets((frames, height, width), size_multiple)


def clip_batches(
    video: VideoOptions, training: TrainingOptions, buckets: list[tuple[int, int, int]]
) -> list[tuple[str, tuple[int, ...]]]:
    """One clip micro-batch ``(B, F, 3, H, W)`` per ``--frame_buckets`` entry; of the automatic set, the bucket of
    the most tokens (every automatic bucket has at most the default's tokens: plan the worst; ``video``,
    ``training``: a data set's ``cfg.video`` and ``cfg.training``)."""
    if not video.frame_buckets:
        buckets = [most_tokens(buckets)]
    return [(f"{f} x {h} x {w}", (training.train_batch_size, f, 3, h, w)) for f, h, w in buckets]


class ClipData(DiffusionData):
    """``FamilySpec.data``: clips (and images as one-frame clips), decoded to the run's buckets
    (``FamilySpec.video_frames``), cached, encoders released (the diffusion base's data stage)."""

    def data_handler(self, cfg: TrainConfig, spec):
        """:class:`~dit_lora.data.video_prepare.VideoMedia` over the run's cache folder."""
        return VideoMedia(cfg, spec, cache_root_for(cfg.data))


class ClipPlan:
    """``FamilySpec.plan`` of a video family, a mixin before the kit's :class:`~dit_lora.kit.components.DiffusionPlan`
    (``class WanPlan(ClipPlan, DiffusionPlan)``): clips ``(B, F, 3, H, W)`` of the buckets ``task`` gives (its
    ``FamilySpec.video_frames``); a family states its components and conditioning."""

    def __init__(self, task: VideoFrames, *args: Any, **kwargs: Any) -> None:
        """``task``: the family's video frames; ``args``, ``kwargs``: the kit base's (the encoders and the loss)."""
        super().__init__(*args, **kwargs)
        self.task = task

    def pixel_batches(self, cfg: TrainConfig) -> list[tuple[str, tuple[int, ...]]]:
        """:func:`clip_batches` of the run's buckets (each data set's, with --dataset_config)."""
        return distinct(
            [
                b
                for c in set_configs(cfg, frames=self.task)
                for b in clip_batches(c.video, c.training, self.task.video_buckets(c))
            ]
        )


class OneClipPerStep:
    """``FamilySpec.defaults`` of a video family: one clip per step (``train_batch_size`` 1), for the family's ``why``
    (the published trainers it follows)."""

    def __init__(self, why: str) -> None:
        self.why = why

    def generic_defaults(self, model: ModelOptions, family_options: FamilyOptions) -> dict[str, tuple[Any, str]]:
        """``train_batch_size`` 1, and why."""
        return {"train_batch_size": (1, self.why)}
