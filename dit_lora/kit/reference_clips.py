"""The diffusers family kit's in-context video data (LTX-2's IC-LoRA): each training clip's reference clip, named as
the edit families name their control images (:mod:`.edit_data`), checked, decoded like its target and cached beside it.

A row of ``metadata.jsonl`` / ``metadata.csv`` names its target clip (``file_name``), its caption and its reference
clip, relative to the metadata file's folder: in ``reference_path`` (Lightricks' LTX-2 trainer's dataset column),
``in_context_videos`` (DiffSynth-Studio's), ``reference_video``, ``control_video`` or ``control_path``
(musubi-tuner's), or the column the family's column option names; or, for a row naming none, the same-named clip in
the family's folder option (``<stem>.mp4``, any video or image extension). The reference becomes the sample's
``conditions`` (hashed into its cache key: a changed reference is encoded again).

Each reference is decoded as its target is (the same frame sampling, the first ``F`` frames by default, frame for
frame: a reference at another frame rate keeps its own frames, which the log counts), resized to cover the target's
bucket divided by the reference downscale factor and centre-cropped, as Lightricks' trainer and diffusers'
``LTX2InContextPipeline`` prepare it. A reference that is missing, unreadable or shorter than its target's frames
stops the run in one paragraph naming it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dit_lora.core.errors import UserError
from dit_lora.data.samples import name_some
from dit_lora.data.video import FrameStart, decode_clip
from dit_lora.data.video_prepare import VideoMedia
from dit_lora.data.video_sample import CLIP_IMAGE_EXTENSIONS, VIDEO_EXTENSIONS, VideoDecodeError, VideoSample
from dit_lora.kit.edit_data import columns_named, metadata_controls, metadata_root, sample_controls

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig

#: the columns read when the family's column option is unset, in this order (the first a row fills wins)
REFERENCE_COLUMNS = ("reference_path", "in_context_videos", "reference_video", "control_video", "control_path")
#: the files a reference folder's same-named reference may be
REFERENCE_EXTENSIONS = VIDEO_EXTENSIONS | CLIP_IMAGE_EXTENSIONS


@dataclasses.dataclass(frozen=True)
class ReferenceFlags:
    """How a family names its reference clips: its column, folder and downscale-factor options (their option names)
    and the model as messages name it."""

    column: str
    folder: str
    factor: str
    model: str


def reference_size(bucket: tuple[int, int, int], factor: int) -> tuple[int, int, int]:
    """``(frames, height, width)`` a reference of a clip of ``bucket`` is decoded to: the bucket's frames, its sides
    divided by ``factor`` (the reference downscale factor)."""
    frames, height, width = bucket
    return frames, height // factor, width // factor


def reference_pixels(
    sample: VideoSample, factor: int, start: FrameStart, max_pixels: int | None = None
) -> torch.Tensor:
    """The reference clip of a bucketed ``sample`` decoded as its target is (``start``: the run's frame sampling) at
    :func:`reference_size`: ``(F, 3, h, w)`` float32 in [-1, 1]."""
    if sample.bucket is None:
        raise ValueError(f"clip {sample.key!r} has no bucket yet: its reference's size follows it")
    frames, height, width = reference_size(sample.bucket, factor)
    return decode_clip(sample.conditions[0], frames, height, width, start=start, max_pixels=max_pixels)


def probe_reference(sample: VideoSample, frames: int) -> tuple[str | None, float]:
    """``(why the reference of sample cannot give frames frames, or None; its frame rate, 0 unknown)``: one probe of
    the file (missing, unreadable, too short)."""
    path = sample.conditions[0]
    probe = VideoSample(key=path, caption="", path=path)
    if probe.is_image:
        return (None if frames == 1 else f"is an image, one frame; its clip trains {frames}"), 0.0
    try:
        info = probe.probe()
    except VideoDecodeError as err:
        return str(err), 0.0
    too_short = f"has {info.num_frames} frame(s); its clip trains {frames}"
    return (None if info.num_frames >= frames else too_short), info.fps


def reference_problem(sample: VideoSample, frames: int) -> str | None:
    """Why the reference of ``sample`` cannot give ``frames`` frames (missing, unreadable, too short), or None."""
    return probe_reference(sample, frames)[0]


class ReferenceMedia(VideoMedia):
    """The clip handler of an in-context family: every clip with its one reference clip (``conditions``)."""

    data_sets = False  # the reference folder option is read beside one data folder
    data_sets_refusal = "its reference clips are read beside the clips of one data folder"

    def __init__(self, cfg: TrainConfig, spec, cache_root, *, flags: ReferenceFlags) -> None:
        super().__init__(cfg, spec, cache_root)
        self.flags = flags

    def option(self, kind: str) -> Any:
        """The run's value of the family's ``column``, ``folder`` or ``factor`` option."""
        return getattr(self.cfg.family_options, getattr(self.flags, kind))

    def list_samples(self) -> list[VideoSample]:
        """The clips, each with the reference its metadata row (or the folder option) names; the references
        themselves are no samples; a paragraph when a clip has none."""
        root = metadata_root(self.cfg, f"{self.flags.model} reads each clip's reference clip", "reference_path")
        found = metadata_controls(root, self.option("column"), REFERENCE_COLUMNS)
        folder = self.option("folder")
        references = {p for c in found.values() for p in c.paths}
        out, missing = [], []
        for sample in super().list_samples():
            if sample.path in references:
                continue  # a clip some row names as its reference
            controls = sample_controls(found, sample, folder, f"--{self.flags.folder}", REFERENCE_EXTENSIONS)
            if controls is None:
                missing.append(sample.key)
                continue
            if controls.refused is not None:
                raise UserError(f"The reference clip of `{sample.key}` is refused: {controls.refused}.")
            if len(controls.paths) != 1:
                raise UserError(
                    f"`{sample.key}` names {len(controls.paths)} reference clips in `{controls.column}`; "
                    f"{self.flags.model} trains one reference per clip. Give it one."
                )
            out.append(dataclasses.replace(sample, conditions=controls.paths))
        if missing:
            named = columns_named(self.option("column"), REFERENCE_COLUMNS)
            raise UserError(
                f"{len(missing)} clip(s) of --train_data_dir have no reference clip in {named} of their metadata "
                f"row{f' nor in --{self.flags.folder}' if folder else ''}: {name_some(missing)}. An in-context LoRA "
                "learns to turn its reference clip (a depth, pose or edge video, ...) into the target: give each row "
                'one, e.g. {"file_name": "clip.mp4", "text": "...", "reference_path": "references/clip.mp4"}, '
                f"relative to the metadata file, name the column with --{self.flags.column}, or put same-named clips "
                f"in a folder given as --{self.flags.folder}."
            )
        return out

    def screen(self, samples: list, *, log: Callable[[str], Any], quarantine: list[dict[str, Any]]) -> list:
        """The clips screened and bucketed as every clip is; then a clip whose reference cannot give its frames is
        left out as a bad clip is (named, quarantined, within ``--max_bad_samples_fraction``), and the references at
        another frame rate than their clip counted."""
        from dit_lora.data.validation import screen

        usable = super().screen(samples, log=log, quarantine=quarantine)
        probed = [probe_reference(s, s.bucket[0]) for s in usable]
        problems = [problem for problem, _ in probed]
        # a reference at another frame rate than its clip is paired frame for frame: counted, said once
        other_rate = sum(
            bool(rate and s.source_fps and abs(rate - s.source_fps) > 0.01) and problem is None
            for s, (problem, rate) in zip(usable, probed)
        )
        if any(p is not None for p in problems):
            usable = screen(
                usable,
                [None if p is None else f"its reference clip {p}" for p in problems],
                max_bad_samples_fraction=self.cfg.data.max_bad_samples_fraction,
                log=log,
                quarantine=quarantine,
                raise_on_fraction=True,
                what="training clips' references",
                failed="cannot give their clips' frames",
                skipped_as="clips whose reference cannot be used",
                fix="A reference gives its clip's frames, frame for frame: fix the paths in the metadata rows "
                "(relative to the metadata file's folder) or the files, or train fewer frames (--max_num_frames); "
                "`dit-lora check-data` lists them.",
            )
        if usable:
            log(
                f"reference clips: {len(usable)}, each decoded frame for frame with its clip, at its bucket / "
                f"{self.option('factor')} (--{self.flags.factor}) and centre-cropped"
                + (f"; {other_rate} come at another frame rate than their clip" if other_rate else "")
            )
        return usable

    def check(self, samples: list, *, log: Callable[[str], Any]) -> tuple[list, list, str | None]:
        """``check-data``: every clip as training would check it, then each usable clip's reference: a row blocking
        the clip whose reference cannot give its frames."""
        from dit_lora.data.preflight import BLOCK

        rows, usable, note = super().check(samples, log=log)
        bad = {s.key: p for s in usable if (p := reference_problem(s, s.bucket[0])) is not None}
        for i, row in enumerate(rows):
            if row.what == "sample" and row.key in bad:
                problem = "; ".join(x for x in (row.problem, f"its reference clip {bad[row.key]}") if x)
                rows[i] = dataclasses.replace(row, status=BLOCK, problem=problem)
        return rows, [s for s in usable if s.key not in bad], note

    def namespace_identity(self, comps=None) -> dict[str, Any]:
        """Every clip's, plus how the references are prepared."""
        return {**super().namespace_identity(comps), "references": f"frame for frame, bucket / {self.option('factor')}"}


def refuse_reference_options(cfg: TrainConfig, model: str) -> None:
    """``--dataset_name`` and ``--cache_latents false`` refused in one paragraph each: the references are named in
    a data folder's metadata and encoded into the latent cache only."""
    if cfg.data.dataset_name:
        raise UserError(
            f"{model} reads each clip's reference clip from a metadata column of --train_data_dir; --dataset_name is "
            "not read for them. Save the dataset's clips and references to a folder with a metadata.jsonl naming "
            'them, e.g. {"file_name": "clip.mp4", "text": "...", "reference_path": "references/clip.mp4"}, and pass '
            "it as --train_data_dir."
        )
    if not cfg.data.cache_latents:
        raise UserError(
            f"--cache_latents false is not supported for {model}: the reference clips are encoded into the latent "
            "cache only. Leave --cache_latents at its default."
        )


def check_reference_config(cfg: TrainConfig, task, model: str) -> None:
    """Refuse what an in-context run of ``model`` cannot take before anything loads: ``--dataset_name``,
    ``--cache_latents false`` (:func:`refuse_reference_options`), a downscale factor that leaves a bucket's reference
    off the model's size grid (``task``: the family's video task), a missing ``--validation_reference``."""
    refuse_reference_options(cfg, model)
    factor = cfg.family_options.reference_downscale_factor
    multiple = task.info(cfg.model).size_multiple
    for bucket in task.video_buckets(cfg):
        _, height, width = reference_size(bucket, factor)
        if height * factor != bucket[1] or width * factor != bucket[2] or height % multiple or width % multiple:
            raise UserError(
                f"--reference_downscale_factor {factor} does not fit the {bucket[0]}x{bucket[1]}x{bucket[2]} bucket: "
                f"its reference would be {bucket[1] / factor:g}x{bucket[2] / factor:g} px, and {model} takes sides "
                f"that are multiples of {multiple}. Use a factor that divides the bucket's sides into multiples of "
                f"{multiple} (1 always does), or other sizes (--height/--width, --frame_buckets)."
            )
    refuse_folder_inside_captioned_data(cfg)
    reference = cfg.family_options.validation_reference
    if reference and not Path(reference).is_file():
        raise UserError(
            f"--validation_reference `{reference}` does not exist. Give a clip, or leave it unset to condition "
            "validation clips on the first training clip's reference."
        )


def refuse_folder_inside_captioned_data(cfg: TrainConfig) -> None:
    """Refuse a ``--reference_dir`` inside a ``--train_data_dir`` that has no metadata file: there every clip of the
    folder (its subfolders too) is a training clip with a caption file beside it, so the references would be read as
    clips without captions. With a metadata file only its rows are clips, and a folder inside is fine."""
    from dit_lora.data.sources import METADATA_FILENAMES

    folder, data = cfg.family_options.reference_dir, cfg.data.train_data_dir
    if not folder or not data or any((Path(data) / name).is_file() for name in METADATA_FILENAMES):
        return
    inside = Path(folder).absolute().is_relative_to(Path(data).absolute())
    if inside:
        raise UserError(
            f"--reference_dir `{folder}` is inside --train_data_dir `{data}`, which has no metadata.jsonl: every clip "
            "there, the references too, would be read as a training clip with a caption file. Move the references "
            "beside the data folder (e.g. `data/` and `references/`), or list the clips in a metadata.jsonl "
            "(`file_name`, `text`, `reference_path`)."
        )
