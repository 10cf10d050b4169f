"""The clip sizes a video family trains and plans: :func:`clip_buckets` (the run's ``(frames, height, width)``
buckets of a transformer whose positions are computed per input size) and :func:`clip_batches` (the planner's clip
micro-batches)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dit_lora.core.errors import UserError
from dit_lora.data.frames import automatic_buckets, check_num_frames, most_tokens, resolution_buckets

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig


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


def clip_batches(cfg: TrainConfig, buckets: list[tuple[int, int, int]]) -> list[tuple[str, tuple[int, ...]]]:
    """One clip micro-batch ``(B, F, 3, H, W)`` per ``--frame_buckets`` entry; of the automatic set, the bucket of
    the most tokens (every automatic bucket has at most the default's tokens: plan the worst)."""
    if not cfg.video.frame_buckets:
        buckets = [most_tokens(buckets)]
    return [(f"{f} x {h} x {w}", (cfg.training.train_batch_size, f, 3, h, w)) for f, h, w in buckets]
