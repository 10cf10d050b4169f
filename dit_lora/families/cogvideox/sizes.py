"""The video sizes a CogVideoX run trains at: the checkpoint's :class:`~.info.ModelInfo` read once, the
``(frames, height, width)`` buckets (the trained size and automatic aspect buckets, or ``--frame_buckets``), the
checks that refuse sizes the model cannot run or was never trained near, the frame rate, and the clip data path."""

from __future__ import annotations

from typing import TypedDict

from dit_lora.core.errors import UserError
from dit_lora.data.frames import automatic_buckets, check_num_frames, resolution_buckets
from dit_lora.data.prepare import cache_root_for
from dit_lora.data.video_prepare import VideoMedia
from dit_lora.families.cogvideox.info import (
    MAX_TOKEN_RATIO,
    MIN_TOKEN_RATIO,
    ModelInfo,
    check_size_multiple,
    model_info,
)
from dit_lora.families.diffusion.components import DiffusionData
from dit_lora.modelfiles.pipeline_files import read_once

#: ``model_info`` by (model, revision, local config files' mtimes): Hub reads cost a request each
_MODEL_INFOS: dict[tuple, ModelInfo] = {}
_INFO_FILES = ("model_index.json", "transformer/config.json", "vae/config.json", "scheduler/scheduler_config.json")


class FrameRule(TypedDict):
    """CogVideoX's frame rule, as the keyword arguments of ``check_num_frames`` and ``resolution_buckets``."""

    temporal_compression: int
    patch_size_t: int | None
    pad_latent_frames: bool


def cached_model_info(cfg) -> ModelInfo:
    """:func:`~.info.model_info`, read once per model path, revision and (local folders) config files' modification
    times, so a rebuilt model is read again. A module-level cache: the spec's components hold no state."""
    return read_once(_MODEL_INFOS, cfg, _INFO_FILES, model_info)


def forget_model_infos() -> None:
    """Drop every cached :class:`~.info.ModelInfo` (``--demo`` may have just rebuilt the model)."""
    _MODEL_INFOS.clear()


def rope_limit(info: ModelInfo) -> tuple[int, int] | None:
    """The largest (height, width) in px CogVideoX 1.5's RoPE takes (its ``grid_type="slice"`` table of
    ``sample_height`` x ``sample_width`` latent px, ``_prepare_rotary_positional_embeddings``); None for 1.0,
    whose RoPE crops a grid of any size."""
    if not info.patch_size_t or not info.rope:
        return None
    return info.sample_height * info.vae_spatial, info.sample_width * info.vae_spatial


def size_flags(cfg) -> str:
    """The flags that set the run's video size, for messages."""
    if cfg.video.frame_buckets:
        return "--frame_buckets"
    given = [f"--{name}" for name in ("height", "width", "max_num_frames") if getattr(cfg.video, name)]
    return "/".join(given) if given else "the defaults"


class CogVideoXVideo:
    """``FamilySpec.video_frames`` and ``frame_rate``: the run's clip buckets, the checks on them, the model's fps."""

    def model_info(self, cfg) -> ModelInfo:
        """:func:`~.info.model_info` of the run's model, read once (:func:`cached_model_info`)."""
        return cached_model_info(cfg)

    def model_fps(self, cfg) -> float:
        """Frames per second the checkpoint generates at (1.0: 8, 1.5: 16): what validation videos are written at."""
        return self.model_info(cfg).fps

    def video_buckets(self, cfg) -> list[tuple[int, int, int]]:
        """``--frame_buckets`` (only those), else automatic aspect buckets around the flags' or the trained size,
        that size first (:func:`~dit_lora.data.frames.automatic_buckets`): sin-cos positions (2B) are recomputed and
        RoPE (5B, 1.5) computed per size, so any multiple of the size multiple runs; a learned position table
        (5B I2V) runs only at its trained size, so such a model keeps the one bucket."""
        info = self.model_info(cfg)
        rule = FrameRule(temporal_compression=info.temporal, patch_size_t=info.patch_size_t, pad_latent_frames=True)
        if cfg.video.frame_buckets:
            return resolution_buckets(cfg.video.frame_buckets, spatial_multiple=info.size_multiple, **rule)
        trained_frames, trained_height, trained_width, _ = info.trained_size()
        frames = cfg.video.max_num_frames or trained_frames
        check_num_frames(
            frames, flag="--max_num_frames" if cfg.video.max_num_frames else "the model's trained frame count", **rule
        )
        height = cfg.video.height or trained_height
        width = cfg.video.width or trained_width
        check_size_multiple(
            "--height" if cfg.video.height else "the model's trained height", height, info.size_multiple, info
        )
        check_size_multiple(
            "--width" if cfg.video.width else "the model's trained width", width, info.size_multiple, info
        )
        if info.learned_positions:
            return [(frames, height, width)]
        buckets = automatic_buckets((frames, height, width), info.size_multiple)
        most = rope_limit(info)
        if most is None:
            return buckets
        # 1.5's RoPE slices a table of the sample size: an automatic bucket never goes beyond it on either side.
        return buckets[:1] + [b for b in buckets[1:] if b[1] <= most[0] and b[2] <= most[1]]

    def check_trained_size(self, cfg) -> None:
        """Refuse buckets far from the checkpoint's trained size (unless ``--allow_untrained_resolution``).

        "Far" counts latent tokens per clip, what both quality and cost follow: more than
        :data:`~.info.MAX_TOKEN_RATIO` or less than :data:`~.info.MIN_TOKEN_RATIO` times the trained size's. Reads
        configs only.
        """
        if cfg.family_options.allow_untrained_resolution:
            return
        info = self.model_info(cfg)
        frames, height, width, why = info.trained_size()
        trained = info.latent_tokens(frames, height, width)
        for bucket in self.video_buckets(cfg):
            tokens = info.latent_tokens(*bucket)
            ratio = tokens / trained
            if MIN_TOKEN_RATIO <= ratio <= MAX_TOKEN_RATIO:
                continue
            f, h, w = bucket
            raise UserError(
                f"{size_flags(cfg)} asks for {f}x{h}x{w} (frames x height x width): {tokens:,} latent tokens "
                f"per clip, {ratio:.3g}x the {trained:,} of {frames}x{height}x{width}, the size "
                f"`{cfg.model.pretrained_model_name_or_path}` was trained at ({why}). So far from its training size the "
                "model generates poorly and a LoRA trained there learns to repair that size, not your data"
                + (f"; each step also costs over {ratio:.0f}x the memory and time. " if ratio > 1 else ". ")
                + f"Use a size within {MIN_TOKEN_RATIO:g}x to {MAX_TOKEN_RATIO:g}x that token count, e.g. "
                f"--height {height} --width {width} --max_num_frames {frames}, or add --allow_untrained_resolution "
                "to train at this size anyway (the flag only lifts this check)."
            )

    def check_rope_size(self, cfg, buckets, info: ModelInfo) -> None:
        """Refuse a bucket beyond CogVideoX 1.5's RoPE table (:func:`rope_limit`): diffusers fails on it mid-step."""
        most = rope_limit(info)
        if most is None:
            return
        beyond = [b for b in buckets if b[1] > most[0] or b[2] > most[1]]
        if beyond:
            f, h, w = beyond[0]
            raise UserError(
                f"{size_flags(cfg)} asks for {f}x{h}x{w} (frames x height x width), but "
                f"`{cfg.model.pretrained_model_name_or_path}`'s rotary position table (CogVideoX 1.5: sample_height x "
                f"sample_width of transformer/config.json) covers at most {most[0]}x{most[1]} px (height x width); "
                f"diffusers cannot place a larger frame. Use a height of at most {most[0]} and a width of at most "
                f"{most[1]}."
            )


class CogVideoXData(DiffusionData):
    """``FamilySpec.data``: clips, decoded to the run's buckets (``FamilySpec.video_frames``), cached, encoders
    released (the diffusion base's data stage)."""

    def data_handler(self, cfg, spec):
        """The clip :class:`~dit_lora.data.video_prepare.VideoMedia`."""
        return VideoMedia(cfg, spec, cache_root_for(cfg.data))
