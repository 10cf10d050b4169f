"""What a video family reads from a checkpoint's small config files, read once (:class:`InfoCache`; the geometry
of a clip VAE and a 3D-patch transformer: :class:`ClipGeometry`), the task a run trains on it
(:class:`VideoTask`: the pipeline, those facts, the clip buckets, the frame rate) and the start notes' line on it
(:class:`VideoNotes`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from dit_lora.data.frames import automatic_note
from dit_lora.kit.components import DiffusionNotes
from dit_lora.kit.video_sizes import clip_buckets
from dit_lora.modelfiles.pipeline_files import read_once

if TYPE_CHECKING:
    from dit_lora.config.schema import ModelOptions, TrainConfig

T = TypeVar("T")

#: the files a pipeline folder's facts are read from (a rebuilt folder changes their modification times)
CONFIG_FILES = ("model_index.json", "transformer/config.json", "vae/config.json", "scheduler/scheduler_config.json")


@dataclass(frozen=True)
class ClipGeometry:
    """A video checkpoint's geometry as its configs say it (diffusers' defaults where a file is unreadable): the VAE's
    latent channels and spatial and temporal compression (``AutoencoderKLWan``'s ``z_dim``,
    ``scale_factor_spatial``, ``scale_factor_temporal``), the transformer's ``(t, h, w)`` patch and the
    scheduler's training timesteps; a family's facts add their own fields (:func:`clip_geometry` reads these)."""

    z_dim: int = 16
    vae_spatial: int = 8
    vae_temporal: int = 4
    patch: tuple[int, int, int] = (1, 2, 2)
    num_train_timesteps: int = 1000

    @property
    def size_multiple(self) -> int:
        """Height and width must be multiples of this (VAE downsampling x patch)."""
        return self.vae_spatial * self.patch[1]


def clip_geometry(tr: dict[str, Any], vae: dict[str, Any], sched: dict[str, Any]) -> dict[str, Any]:
    """:class:`ClipGeometry`'s fields from the transformer, VAE and scheduler configs (``{}`` each when unreadable;
    an int ``patch_size`` is the spatial patch, with no temporal one)."""
    raw = tr.get("patch_size", (1, 2, 2))
    p_t, p_h, p_w = (1, raw, raw) if isinstance(raw, int) else raw
    return {
        "z_dim": int(vae.get("z_dim", 16)),
        "vae_spatial": int(vae.get("scale_factor_spatial", 8)),
        "vae_temporal": int(vae.get("scale_factor_temporal", 4)),
        "patch": (int(p_t), int(p_h), int(p_w)),
        "num_train_timesteps": int(sched.get("num_train_timesteps", 1000)),
    }


class InfoCache(Generic[T]):
    """``read(model)`` (the run's ``cfg.model``), once per model path, revision and (local folders) the modification times of ``files``
    (:func:`~dit_lora.modelfiles.pipeline_files.read_once`): a module-level cache, the spec's components hold no
    state."""

    def __init__(self, read: Callable[..., T], files: tuple[str, ...] = CONFIG_FILES) -> None:
        self.read, self.files = read, files
        self.seen: dict[tuple, T] = {}

    def __call__(self, model: ModelOptions) -> T:
        """What ``read`` returned for this model, read again only when the model changed."""
        return read_once(self.seen, model, self.files, self.read)

    def forget(self) -> None:
        """Drop the configs read so far (``--demo`` has just rewritten the model folder)."""
        self.seen.clear()


@dataclass(frozen=True)
class VideoTask:
    """``FamilySpec.video_frames`` and ``frame_rate``: one task of a video family (text- or image-to-video) and what
    it reads from the checkpoint; every other component holds it. A family states its :attr:`infos` and
    :attr:`label`; the facts they read give ``trained_size()`` (frames, height and width first), ``size_multiple``,
    ``vae_spatial``, ``vae_temporal``, ``patch`` and ``fps``."""

    #: the registry name (``--family``)
    name: str
    #: ``"t2v"``, ``"i2v"`` or ``"ic"`` (in-context: a reference clip beside each clip)
    task: str
    #: the diffusers pipeline class the family samples with and the card names
    pipeline_class_name: str
    #: the family's facts of a checkpoint, read once, and the model's name in a size refusal
    infos: ClassVar[InfoCache[Any]]
    label: ClassVar[str]

    @property
    def mode(self) -> str:
        """The task as the start notes say it (image-to-video: how the first frame trains, as the pipelines step it)."""
        if self.task == "i2v":
            return "image-to-video (first latent frame clean, timestep 0, out of the loss)"
        if self.task == "ic":
            return "in-context video-to-video (each clip's reference clip appended, clean, timestep 0, out of the loss)"
        return "text-to-video"

    def info(self, model: ModelOptions) -> Any:
        """What the checkpoint's configs say (``model``: the run's ``cfg.model``), read once (:attr:`infos`, looked
        up on the class: a test stands in a plain function)."""
        return type(self).infos(model)

    def pipeline_class(self) -> Any:
        """The diffusers pipeline class (imported on use: diffusers' pipelines import slowly)."""
        import diffusers

        return getattr(diffusers, self.pipeline_class_name)

    def model_fps(self, model: ModelOptions) -> float:
        """Frames per second the checkpoint generates at (its facts' ``fps``): the rate the log names."""
        return self.info(model).fps

    def video_buckets(self, cfg: TrainConfig) -> list[tuple[int, int, int]]:
        """``--frame_buckets`` (only those), else automatic aspect buckets around ``--max_num_frames`` x ``--height``
        x ``--width`` or the checkpoint's trained size, that size first (:func:`~.video_sizes.clip_buckets`: the
        transformer's RoPE is computed per input size, so any multiple of ``size_multiple`` runs; the frame rule is
        the VAE's temporal compression, there being no temporal patch)."""
        info = self.info(cfg.model)
        stride = f"VAE {info.vae_spatial}x downsampling times patch {info.patch[1]}"
        multiple, factor = info.size_multiple, self.reference_factor(cfg)
        # an in-context task's references (the sides / factor) stay on the model's grid too: the automatic buckets
        # and --height/--width are made on the grid times the factor (--frame_buckets as given: the in-context check
        # refuses one off it, naming the factor)
        if factor > 1 and not cfg.video.frame_buckets:
            multiple, stride = multiple * factor, f"{stride}, times --reference_downscale_factor {factor}"
        return clip_buckets(cfg, info.trained_size()[:3], multiple, info.vae_temporal, self.label, stride)

    def reference_factor(self, cfg: TrainConfig) -> int:
        """An in-context task's ``--reference_downscale_factor`` (1 for every other task)."""
        return int(getattr(cfg.family_options, "reference_downscale_factor", 1) or 1) if self.task == "ic" else 1


class VideoNotes(DiffusionNotes):
    """``FamilySpec.notes`` of a video family, built with its task: the start notes' line on what the run trains
    (:meth:`trained_note`), which a family follows with its own lines."""

    def __init__(self, task: VideoTask) -> None:
        self.task = task

    def trained_note(self, cfg: TrainConfig, rate: str | None = None) -> str:
        """The model, the task, the training size (the first bucket) and its ``rate`` (default: the checkpoint's
        frame rate), and the other automatic buckets (:func:`~dit_lora.data.frames.automatic_note`)."""
        buckets = self.task.video_buckets(cfg)
        f, h, w = buckets[0]
        at = rate if rate is not None else f" at {self.task.model_fps(cfg.model):g} fps"
        return (
            f"model: {self.task.info(cfg.model).describe()}; {self.task.mode}; training size {f}x{h}x{w} (frames x height x "
            f"width){at}" + automatic_note(buckets, automatic=not cfg.video.frame_buckets)
        )
