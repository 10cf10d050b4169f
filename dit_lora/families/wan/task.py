"""What a Wan run decides from its checkpoint and options before anything loads: the task (text- or image-to-video),
the checkpoint's configs read once, the trained expert(s), the TI2V image-mode fraction, the clip buckets, the start
notes and the defaults of an uncatalogued checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dit_lora.config import TrainConfig
from dit_lora.core.errors import UserError
from dit_lora.data.frames import (
    automatic_buckets,
    automatic_note,
    check_num_frames,
    resolution_buckets,
)
from dit_lora.families.diffusion.components import DiffusionNotes
from dit_lora.families.wan.info import WanInfo, wan_info
from dit_lora.modelfiles.pipeline_files import read_once

_INFOS: dict[tuple, WanInfo] = {}
_INFO_FILES = ("model_index.json", "transformer/config.json", "vae/config.json", "scheduler/scheduler_config.json")


def cached_wan_info(cfg: TrainConfig) -> WanInfo:
    """:func:`wan_info`, read once per model path, revision and (local folders) config files' modification times."""
    return read_once(_INFOS, cfg, _INFO_FILES, wan_info)


def forget_infos() -> None:
    """Drop the configs read so far (``--demo`` has just rewritten the model folder)."""
    _INFOS.clear()


@dataclass(frozen=True)
class WanTask:
    """``FamilySpec.video_frames`` and ``frame_rate``: one of the two Wan families (``wan``: text-to-video, ``wan_i2v``:
    image-to-video) and what it reads from the checkpoint; every other component holds it."""

    #: the registry name (``--family``)
    name: str
    #: ``"t2v"`` or ``"i2v"``
    task: str
    #: the checkpoint kinds this family trains
    kinds: tuple[str, ...]
    #: the diffusers pipeline class the family samples with and the card names
    pipeline_class_name: str

    def info(self, cfg: TrainConfig) -> WanInfo:
        """What the checkpoint's configs say, read once (:func:`cached_wan_info`)."""
        return cached_wan_info(cfg)

    def pipeline_class(self):
        """The diffusers pipeline class (imported on use: diffusers' pipelines import slowly)."""
        import diffusers

        return getattr(diffusers, self.pipeline_class_name)

    def expert(self, cfg: TrainConfig) -> str | None:
        """The trained expert(s) of a two-expert checkpoint (``--wan_expert``, default ``both``); None otherwise."""
        if not self.info(cfg).two_experts:
            return None
        return cfg.family_options.wan_expert or "both"

    def image_probability(self, cfg: TrainConfig) -> float:
        """TI2V-5B: the fraction of samples trained in image mode (0 for other checkpoints)."""
        if self.info(cfg).kind != "ti2v":
            return 0.0
        p = cfg.family_options.ti2v_image_probability
        return float(p) if p is not None else (1.0 if self.task == "i2v" else 0.0)

    def model_fps(self, cfg: TrainConfig) -> float:
        """Frames per second the checkpoint generates at (:attr:`WanInfo.fps`): the rate the log names."""
        return self.info(cfg).fps

    def video_buckets(self, cfg: TrainConfig) -> list[tuple[int, int, int]]:
        """The run's (frames, height, width) buckets: ``--frame_buckets`` (only those), else automatic aspect buckets
        around the flags' or the default size, that size first (:func:`~dit_lora.data.frames.automatic_buckets`:
        Wan's RoPE is computed per input size, so any multiple of ``size_multiple`` runs)."""
        info = self.info(cfg)
        temporal = info.vae_temporal  # the frame rule (Wan has no temporal patch: patch_size_t None)
        if cfg.video.frame_buckets:
            return resolution_buckets(
                cfg.video.frame_buckets, spatial_multiple=info.size_multiple, temporal_compression=temporal
            )
        frames0, height0, width0, _ = info.trained_size()
        frames = cfg.video.max_num_frames or frames0
        named = "--max_num_frames" if cfg.video.max_num_frames else "the default frame count"
        check_num_frames(frames, flag=named, temporal_compression=temporal)
        height, width = cfg.video.height or height0, cfg.video.width or width0
        for flag, value in (("--height", height), ("--width", width)):
            if value % info.size_multiple:
                fixed = max(info.size_multiple, round(value / info.size_multiple) * info.size_multiple)
                raise UserError(
                    f"{flag} {value} must be a multiple of {info.size_multiple} for this Wan checkpoint "
                    f"(VAE {info.vae_spatial}x downsampling times patch {info.patch[1]}); use {fixed}."
                )
        return automatic_buckets((frames, height, width), info.size_multiple)


class WanNotes(DiffusionNotes):
    """``FamilySpec.notes``: the checkpoint, the training size, the experts and the TI2V image mode."""

    def __init__(self, task: WanTask) -> None:
        self.task = task

    def start_notes(self, cfg: TrainConfig) -> list[str]:
        """What the run trains (model, size, fps), which expert(s) and how, and the TI2V image-mode share."""
        info = self.task.info(cfg)
        f, h, w = self.task.video_buckets(cfg)[0]
        also = automatic_note(self.task.video_buckets(cfg), automatic=not cfg.video.frame_buckets)
        notes = [
            f"model: {info.describe()}; training size {f}x{h}x{w} (frames x height x width) at {info.fps} fps" + also
        ]
        expert = self.task.expert(cfg)
        if expert:
            what = {
                "high": "the high-noise expert (transformer) only",
                "low": "the low-noise expert (transformer_2) only",
                "both": "both experts, alternating steps (odd: high noise, even: low noise)",
            }[expert]
            notes.append(
                f"two-expert checkpoint (boundary_ratio {info.boundary_ratio:g}): training {what}; each "
                "expert's steps draw only its own timesteps"
            )
            if expert != "both" and cfg.validation.validation_prompt:
                notes.append(
                    "validation videos during training run the trained expert for every denoising step "
                    "(the other expert is not loaded); the final samples use both, with the adapter"
                )
        if info.kind == "ti2v":
            notes.append(f"TI2V-5B: {self.task.image_probability(cfg):.0%} of samples in image-to-video mode")
        return notes


class WanDefaults:
    """``FamilySpec.defaults``: what any Wan checkpoint implies."""

    def generic_defaults(self, cfg: TrainConfig) -> dict[str, tuple[Any, str]]:
        """One clip per step, as every published Wan LoRA recipe (musubi-tuner, DiffSynth-Studio, SimpleTuner)."""
        return {"train_batch_size": (1, "video: one clip per step, as the published Wan LoRA trainers")}
