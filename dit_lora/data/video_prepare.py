"""Video data for video diffusion families (their `data_handler`): list clips, screen and bucket them, load pixels.

:func:`~dit_lora.data.prepare.prepare_data` runs the same flow for images and clips (screen,
quarantine, cache, batch); :class:`VideoMedia` is what differs for clips:

* listing: ``--train_data_dir`` through :func:`~dit_lora.data.video_sources.load_video_samples`, or
  ``--dataset_name`` through :func:`load_video_dataset` (clips stored as bytes in the dataset are
  written once, content-addressed, under ``<cache root>/videos/`` so every clip has a file path);
* screening: every clip is decoded once; unreadable, truncated and too-short clips are left out
  and every kept clip gets its (frames, height, width) bucket from ``family.video_buckets(cfg)``;
* images among the clips (any layout, or ``--dataset_name`` rows) are one-frame clips: each gets a ``(1, h, w)``
  bucket whose size is one of the run's buckets' (:func:`~dit_lora.data.frames.one_frame_buckets`, chosen by the
  clips' aspect rule). These buckets are the data layer's, added only when the data holds images and only when the
  family's own frame rule takes one frame (:func:`image_buckets_for`); ``video_buckets(cfg)`` stays the clips';
* pixels: :func:`~dit_lora.data.video.decode_clip` to the clip's bucket, one clip per encode call
  (a 49x480x720 clip through the VAE is already heavy);
* batching: with several buckets, the bucket index of each clip is its batch group, so images and clips train
  in one run, in separate batches.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from dit_lora.config.checks import check_one_source
from dit_lora.contract import spec as fallback
from dit_lora.contract.capabilities import Encoders, VideoFrames
from dit_lora.contract.spec import FamilySpec
from dit_lora.core.errors import UserError
from dit_lora.core.fileio import write_bytes_atomic
from dit_lora.data import listing, preflight
from dit_lora.data.batches import RawVideoDataset, collate
from dit_lora.data.decode import pixel_budget
from dit_lora.data.frames import Bucket, bucket_table, describe_buckets, one_frame_buckets
from dit_lora.data.hub_datasets import (
    check_dataset_columns,
    dataset_captions,
    dataset_files_root,
    open_dataset,
    place_dataset_path,
)
from dit_lora.data.kohya import checked_instance_prompt, refuse_caption_extension_for_dataset
from dit_lora.data.paths import Located
from dit_lora.data.prepare import report_captions
from dit_lora.data.sources import name_some
from dit_lora.data.video import (
    CLIP_IMAGE_EXTENSIONS,
    VIDEO_EXTENSIONS,
    FrameStart,
    VideoSample,
    decode_clip,
    frames_flag_for,
    validate_video_samples,
)
from dit_lora.data.video_sources import load_video_samples

if TYPE_CHECKING:
    from dit_lora.config.schema import TrainConfig, VideoOptions

__all__ = [
    "VideoMedia",
    "frame_sampling_lines",
    "image_buckets_for",
    "load_video_dataset",
    "materialise_clip",
    "video_namespace_identity",
]

_ROWS_PER_READ = 64  # dataset rows fetched at once: bounded memory for datasets that embed clip bytes


def materialise_clip(data: bytes, folder: str | os.PathLike, suffix: str = ".mp4") -> Path:
    """Write clip bytes once to ``folder/<sha256 of the bytes><suffix>`` (atomically) and return the path.

    Content addressing makes every rank and every run agree on the name, and a file already there
    is reused; the temporary file plus ``os.replace`` means a reader never sees half a clip.
    """
    folder = Path(folder)
    path = folder / f"{hashlib.sha256(data).hexdigest()}{suffix}"
    if path.is_file() and path.stat().st_size == len(data):
        return path
    folder.mkdir(parents=True, exist_ok=True)
    return write_bytes_atomic(path, data)


def _suffix(name: str | None, default: str = ".mp4") -> str:
    # FFmpeg and PIL probe the content; the suffix only says clip or image (an image is a one-frame clip).
    ext = os.path.splitext(name or "")[1].lower()
    return ext if ext in VIDEO_EXTENSIONS or ext in CLIP_IMAGE_EXTENSIONS else default


def _clip_path(
    value: Any, base_dir: str, clip_folder: Path, place: Callable[[str], Located], default_suffix: str = ".mp4"
) -> Located | None:
    """The file of one dataset cell: bytes written under ``clip_folder``, a ``Video``/``Image`` cell's own path
    (relative to ``base_dir``), or a path string placed by ``place`` (refused when it leaves the dataset's files)."""
    if isinstance(value, dict):
        if value.get("bytes"):
            suffix = _suffix(value.get("path"), default_suffix)
            path = str(materialise_clip(bytes(value["bytes"]), clip_folder, suffix))
            return Located(path, path, None)
        written = value.get("path")  # written by `datasets` itself (see hub_datasets.dataset_files_root)
        if isinstance(written, str) and written.strip():
            path = os.path.normpath(written if os.path.isabs(written) else os.path.join(base_dir, written))
            return Located(path, path, None)
        return None
    if isinstance(value, str) and value.strip():
        return place(value)
    return None


def _video_column_hint(dataset: Any, exclude: str) -> str:
    import datasets

    for name, feature in dataset.features.items():
        if name != exclude and isinstance(feature, (datasets.Video, datasets.Image)):
            return f" (probably --video_column {name})"
    for name in dataset.column_names:
        if name != exclude and "video" in name.lower():
            return f" (probably --video_column {name})"
    return ""


def load_video_dataset(
    dataset_name: str,
    config_name: str | None = None,
    *,
    video_column: str | None = None,
    caption_column: str = "text",
    max_train_samples: int | None = None,
    clip_folder: str | os.PathLike,
    cache_dir: str | None = None,
    instance_prompt: str | None = None,
    split: str = "train",
    log: Callable[[str], Any] = listing.say,
) -> list[VideoSample]:
    """List the clips of a `datasets` dataset (its ``split``, ``--dataset_split``) without decoding them.

    The clips are in ``video_column`` (default ``video``): a ``datasets.Video`` column (read with
    ``decode=False``, so neither torchcodec nor decord is needed), a ``datasets.Image`` column (every row a
    one-frame clip, its bytes written out as below) or a string column of paths (clips or images) inside
    the dataset's own files (:func:`~dit_lora.data.hub_datasets.dataset_files_root`): relative to the folder of a
    local dataset; a path that leaves them is refused (the clip is quarantined with the reason, never opened).
    Clips stored as bytes are written once to ``clip_folder`` (content-addressed, see :func:`materialise_clip`).
    Keys are ``"<dataset_name>[<row>]"``, order is row order, ``max_train_samples`` keeps the first N rows.
    With ``instance_prompt`` every row is captioned with it and the caption column is not read (said through ``log``).

    Raises:
        UserError: the dataset does not load, a missing video or caption column, a column that
            holds neither videos nor paths, rows without a caption or without a clip.
    """
    column = video_column or "video"
    dataset = open_dataset(dataset_name, config_name, cache_dir, what="videos", split=split)
    # With --instance_prompt no caption column is needed: the video column stands in for it in the check.
    check_dataset_columns(
        dataset_name,
        list(dataset.column_names),
        column,
        caption_column if instance_prompt is None else column,
        what="videos",
        media_hint=_video_column_hint(dataset, caption_column),
    )
    if max_train_samples is not None and max_train_samples < len(dataset):
        dataset = dataset.select(range(max_train_samples))
    videos, feature = _video_column(dataset, dataset_name, column)
    captions = _row_captions(dataset, dataset_name, caption_column, instance_prompt, log)
    placed = _placed_clips(videos, feature, dataset_name, column, clip_folder)
    # A refused row keeps its written path as its path (never opened): screening quarantines it with the reason.
    return [
        VideoSample(
            key=f"{dataset_name}[{row}]",
            caption=caption,
            index=i,
            path=placed[row].path or placed[row].key,
            refused=placed[row].refused,
        )
        for i, (row, caption) in enumerate(captions)
    ]


def _video_column(dataset, dataset_name: str, column: str):
    """The dataset's clip column alone, with its feature: a video or image column read as ``{"path", "bytes"}``
    (no decoder needed) or a column of paths; refused when it holds anything else."""
    import datasets  # slow import; only paid when --dataset_name is used

    feature = dataset.features[column]
    videos = dataset.select_columns([column])
    media = isinstance(feature, (datasets.Video, datasets.Image))
    if media:  # {"path", "bytes"}: no decoder needed
        videos = videos.cast_column(column, type(feature)(decode=False))
    elif not (isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")):
        raise UserError(
            f"Column {column!r} of --dataset_name {dataset_name!r} holds {feature!r}, not videos, images or their "
            f"paths. Pass --video_column with the column of videos "
            f"(columns: {', '.join(map(repr, dataset.column_names))})."
        )
    return videos, feature


def _row_captions(dataset, dataset_name: str, caption_column: str, instance_prompt: str | None, log):
    """``(row, caption)`` of every row: from the caption column, or ``--instance_prompt`` for all (said in a line)."""
    if instance_prompt is None:
        return dataset_captions(dataset, dataset_name, caption_column)
    captions = [(row, instance_prompt) for row in range(len(dataset))]
    log(
        f"--instance_prompt: all {len(captions)} row(s) of --dataset_name are captioned {instance_prompt!r}; "
        f"the caption column is not read (diffusers' DreamBooth scripts do the same)"
    )
    return captions


def _placed_clips(videos, feature, dataset_name: str, column: str, clip_folder) -> list[Located]:
    """Each row's clip: a path inside the dataset's files, or its bytes written once to ``clip_folder``; refused
    when a row has no clip."""
    import datasets

    media = isinstance(feature, (datasets.Video, datasets.Image))
    # Image bytes whose name says nothing are written as .png: the suffix marks them images, PIL reads any format.
    default_suffix = ".png" if isinstance(feature, datasets.Image) else ".mp4"
    base_dir = dataset_name if os.path.isdir(dataset_name) else os.getcwd()
    root = dataset_files_root(dataset_name) if not media else None
    paths: list[Located | None] = []
    for start in range(0, len(videos), _ROWS_PER_READ):
        for value in videos[start : start + _ROWS_PER_READ][column]:
            field = f"row {len(paths)}: {column}"
            paths.append(
                _clip_path(
                    value,
                    base_dir,
                    Path(clip_folder),
                    functools.partial(place_dataset_path, root, dataset_name, field=field),
                    default_suffix,
                )
            )
    placed = [path for path in paths if path is not None]  # row for row, unless a row has none (refused here)
    if len(placed) < len(paths):
        empty = [f"{dataset_name}[{row}]" for row, path in enumerate(paths) if path is None]
        raise UserError(
            f"{len(empty)} row(s) of --dataset_name {dataset_name!r} have no video in column {column!r}: "
            f"{name_some(empty)}. Fill them in, drop those rows, or pick another --video_column."
        )
    return placed


def frame_start(video: VideoOptions) -> FrameStart:
    """``--frame_sampling`` as the decoders type it (the parser has already refused any other value)."""
    return cast(FrameStart, video.frame_sampling)


def video_namespace_identity(cfg: TrainConfig, spec: FamilySpec, comps=None) -> dict[str, Any]:
    """What besides the clip and its bucket shapes a cached video entry (the cache namespace's identity).

    No image ``resolution``: each entry's name carries its bucket, so changing frames or sizes
    re-encodes only the clips whose bucket changed. Frames are always centre-cropped (no crop seed).
    """
    encoders: Encoders = fallback.require(spec, "encoders", "Video data")
    return {
        **encoders.cache_identity(cfg, comps),
        "media": "video",
        "frame_sampling": cfg.video.frame_sampling,
        "random_flip": cfg.data.random_flip,
        "crop": "center",
    }


def _sampled(sample, sampling: str) -> tuple[float, float] | None:
    """(seconds of the clip its bucket's frames span, frames per second they are taken at), or None (an image, or a
    clip whose frame rate the container does not give). Mirrors :func:`~dit_lora.data.video._frame_indices`."""
    frames = sample.bucket[0] if sample.bucket else 0
    total, fps = sample.source_frames, sample.source_fps
    if getattr(sample, "is_image", False) or fps <= 0 or frames < 2 or total < frames:
        return None
    step = 1.0 if sampling == "first" else (total - 1) / (frames - 1)  # source frames between two sampled ones
    return (1 + step * (frames - 1)) / fps, fps / step


def frame_sampling_lines(samples: list, sampling: str, model_fps: float | None) -> list[str]:
    """What ``--frame_sampling`` does to the clips' timing, said once: the range of seconds each clip's frames span
    and of the frame rates they are taken at, then a warning naming the clips sampled outside half to twice the
    model's rate (their motion trains faster or slower than the model generates). ``[]`` without clips."""
    timed = [(s, t) for s in samples if (t := _sampled(s, sampling)) is not None]
    if not timed:
        return []
    spans = [t[0] for _, t in timed]
    rates = [t[1] for _, t in timed]
    counts = sorted({s.bucket[0] for s, _ in timed})
    frames = str(counts[0]) if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    model = f"; the model runs at {model_fps:g} fps" if model_fps else ""
    other = (
        "--frame_sampling first takes consecutive frames"
        if sampling != "first"
        else "--frame_sampling uniform spreads them over the whole clip"
    )
    lines = [
        f"frame sampling {sampling}: the clips' {frames} frames span {min(spans):.1f} to {max(spans):.1f} s of "
        f"each clip ({min(rates):.1f} to {max(rates):.1f} frames per second{model}); {other}"
    ]
    if not model_fps:
        return lines
    far = list(dict.fromkeys(s.key for s, (_, rate) in timed if not 0.5 * model_fps <= rate <= 2 * model_fps))
    if far:
        fix = (
            "--frame_sampling first keeps each clip's own speed"
            if sampling != "first"
            else f"re-encode those clips at about {model_fps:g} fps"
        )
        lines.append(
            f"warning: {len(far)} clip(s) are sampled at under {0.5 * model_fps:g} or over "
            f"{2 * model_fps:g} frames per second, far from the model's {model_fps:g} fps, so their motion "
            f"trains faster or slower than the model generates: {name_some(far)}; {fix}"
        )
    return lines


def _bucket_text(buckets) -> str:
    return ",".join(f"{f}x{h}x{w}" for f, h, w in buckets)


def image_buckets_for(spec: FamilySpec, cfg: TrainConfig, buckets: list[Bucket], samples: list) -> list[Bucket]:
    """The one-frame buckets the images among ``samples`` train in (``[]`` when there is none).

    One ``(1, h, w)`` per spatial size of ``buckets`` (the family's, :func:`~dit_lora.data.frames.one_frame_buckets`).
    Whether the model takes one frame is the family's own frame rule: its ``video_buckets`` is asked for these
    buckets as ``--frame_buckets`` (what checks a user's buckets, e.g. CogVideoX's ``4k+1``) on a copy of ``cfg``.

    Raises:
        UserError: the rule refuses one frame (or the family ignores the buckets asked): one paragraph naming the
            images and the fix.
    """
    images = [s for s in samples if getattr(s, "is_image", False)]
    if not images:
        return []
    stills = one_frame_buckets(buckets)
    asked = [b for b in stills if b not in buckets]  # a one-frame bucket the user gave is already the family's
    if not asked:
        return stills
    probe = dataclasses.replace(cfg, video=dataclasses.replace(cfg.video, frame_buckets=_bucket_text(asked)))  # frozen
    frames: VideoFrames = fallback.require(spec, "video_frames", "Video data")
    try:
        given = [tuple(b) for b in frames.video_buckets(probe)]
    except UserError as err:
        reason: str | None = " ".join(str(err).split())
    else:
        ignored = any(b not in given for b in asked)
        reason = f"asked for {probe.video.frame_buckets}, it gives {_bucket_text(given)}" if ignored else None
    if reason is None:
        return stills
    name = spec.name
    shortest = min(b[0] for b in buckets)
    raise UserError(
        f"The video dataset holds {len(images)} image(s) ({name_some([s.key for s in images])}), which train as "
        f"one-frame clips in bucket(s) {_bucket_text(asked)}, but the {name} model does not take a one-frame clip "
        f"(its frame rule, asked for those buckets: {reason}). Remove the images from --train_data_dir or "
        f"--dataset_name (their rows or files), or make each a clip of {shortest} frames (e.g. the still repeated) "
        f"to train on it."
    )


class VideoMedia:
    """What :func:`~dit_lora.data.prepare.prepare_data` and ``check-data`` do differently for clips (and images,
    one-frame clips)."""

    noun = "clip"
    cacheable = True
    encode_batch_size = 1  # one clip per VAE call: memory, not throughput, limits video encoding
    collate = staticmethod(collate)
    #: trains from a dataset config (:mod:`.data_sets`): it reads nothing of the data beyond each set's samples
    data_sets = True

    def __init__(self, cfg: TrainConfig, spec: FamilySpec, cache_root: Path) -> None:
        # Clips need a family that encodes them (encoders), buckets them (video_frames) and says about captions.
        fallback.require(spec, "encoders", "Video data")
        self.frames: VideoFrames = fallback.require(spec, "video_frames", "Video data")
        self.requires_captions = fallback.requires_captions(spec)
        self.cfg, self.spec, self.cache_root = cfg, spec, Path(cache_root)
        self._buckets: list[tuple[int, int, int]] | None = None

    @property
    def buckets(self) -> list[tuple[int, int, int]]:
        """The family's validated (frames, height, width) buckets for this config."""
        if self._buckets is None:
            self._buckets = [(frames, height, width) for frames, height, width in self.frames.video_buckets(self.cfg)]
        return self._buckets

    @property
    def automatic(self) -> bool:
        """Whether the buckets are the automatic aspect set (no ``--frame_buckets``: the family made several)."""
        return not self.cfg.video.frame_buckets and len(self.buckets) > 1

    @property
    def model_fps(self) -> float | None:
        """The frame rate the model generates at (the family's ``frame_rate`` component), or None when the family
        does not say."""
        return self.spec.frame_rate.model_fps(self.cfg.model) if self.spec.frame_rate is not None else None

    @property
    def frames_flag(self) -> str:
        """The option a too-short clip is measured against, as reasons and errors name it."""
        return frames_flag_for(self.buckets, from_buckets=bool(self.cfg.video.frame_buckets))

    @property
    def max_pixels(self) -> int:
        """An image's pixel budget (``--max_image_pixels``, or its default for the largest bucket), one for every
        image so that screening, caching and the uncached loader agree."""
        height, width = max(((h, w) for _, h, w in self.buckets), key=lambda hw: hw[0] * hw[1])
        return pixel_budget((height, width), self.cfg.data.max_image_pixels)

    def image_buckets(self, samples: list) -> list[Bucket]:
        """The one-frame buckets of the images among ``samples`` (:func:`image_buckets_for`)."""
        return image_buckets_for(self.spec, self.cfg, self.buckets, samples)

    def all_buckets(self, samples: list) -> list[Bucket]:
        """The video buckets, then the one-frame buckets the images add (not checked here: :meth:`screen` did)."""
        if not any(getattr(s, "is_image", False) for s in samples):
            return list(self.buckets)
        return self.buckets + [b for b in one_frame_buckets(self.buckets) if b not in self.buckets]

    def list_samples(self) -> list[VideoSample]:
        """The clips (and images) of ``--train_data_dir`` or ``--dataset_name``, not decoded yet."""
        cfg = self.cfg
        check_one_source(
            cfg.data.train_data_dir, cfg.data.dataset_name, "videos with metadata.jsonl or prompts.txt + videos.txt"
        )
        if cfg.data.train_data_dir is not None:
            return load_video_samples(
                cfg.data.train_data_dir,
                cfg.data.caption_column,
                cfg.video.video_column,
                cfg.data.max_train_samples,
                caption_extension=cfg.data.caption_extension,
                instance_prompt=cfg.data.instance_prompt,
            )
        if cfg.data.max_train_samples is not None and cfg.data.max_train_samples < 1:
            raise UserError(f"--max_train_samples must be a positive whole number, got {cfg.data.max_train_samples!r}.")
        dataset = cfg.data.dataset_name
        assert dataset is not None  # check_one_source refused a run with neither source
        refuse_caption_extension_for_dataset(cfg.data.caption_extension, dataset, cfg.data.caption_column, "clip")
        return load_video_dataset(
            dataset,
            cfg.data.dataset_config_name,
            video_column=cfg.video.video_column,
            caption_column=cfg.data.caption_column,
            max_train_samples=cfg.data.max_train_samples,
            clip_folder=self.cache_root / "videos",
            instance_prompt=checked_instance_prompt(cfg.data.instance_prompt),
            split=cfg.data.dataset_split,
        )

    def screen(self, samples: list, *, log: Callable[[str], Any], quarantine: list[dict[str, Any]]) -> list:
        """Decode every clip and image once, leave out the bad and too-short ones, give the others their bucket."""
        stills = self.image_buckets(samples)
        good = validate_video_samples(
            samples,
            buckets=self.buckets,
            frames_flag=self.frames_flag,
            max_bad_samples_fraction=self.cfg.data.max_bad_samples_fraction,
            log=log,
            quarantine=quarantine,
            require_captions=self.requires_captions,
            raise_on_fraction=False,
            image_buckets=stills,
            max_pixels=self.max_pixels,
        )
        files = [s for s in good if s.repeat == 0]  # a kohya copy shares its file's bucket: tables count files
        if len(files) < len(good):
            log(f"the clip table counts files: {len(good)} samples per epoch with repeats")
        for line in bucket_table(self.all_buckets(samples), files, automatic=self.automatic):
            log(line)
        for line in frame_sampling_lines(files, self.cfg.video.frame_sampling, self.model_fps):
            log(line)
        return good

    def check(self, samples: list, *, log: Callable[[str], Any]) -> tuple[list, list, str | None]:
        """``check-data``: every clip decoded to its bucket as training would; (rows, usable clips, note)."""
        stills = self.image_buckets(samples)
        images = sum(1 for s in samples if s.is_image)
        shown = describe_buckets(self.all_buckets(samples), automatic=self.automatic)
        what = f" ({images} of them images, one-frame clips)" if images else ""
        log(f"checking {len(samples)} clip(s){what} for bucket(s) {shown} (frames x height x width) ...")
        rows, usable = preflight.check_video_samples(
            samples,
            buckets=self.buckets,
            frame_sampling=frame_start(self.cfg.video),
            frames_flag=self.frames_flag,
            require_captions=self.requires_captions,
            image_buckets=stills,
            max_pixels=self.max_pixels,
        )
        report_captions(samples, self.cfg, self.spec, log)
        return rows, usable, None  # each row has its bucket and crop; the summary counts them (preflight.summarize)

    def namespace_identity(self, comps=None) -> dict[str, Any]:
        return video_namespace_identity(self.cfg, self.spec, comps)

    def pixel_loader(self, samples: list) -> Callable[[int], torch.Tensor]:
        """``i -> (F, 3, H, W)`` pixels of clip ``i`` at its bucket, frames picked per --frame_sampling (an image:
        ``(1, 3, H, W)``)."""
        max_pixels = self.max_pixels

        def load(i: int) -> torch.Tensor:
            frames, height, width = samples[i].bucket
            return decode_clip(
                samples[i].path, frames, height, width, start=frame_start(self.cfg.video), max_pixels=max_pixels
            )

        return load

    def raw_dataset(self, samples: list):
        return RawVideoDataset(samples, frame_start(self.cfg.video), max_pixels=self.max_pixels)

    def groups(self, samples: list, *, world_size: int = 1, log: Callable[[str], Any] = print) -> list[int] | None:
        """Bucket index of every clip (batches never mix buckets), or None with a single bucket."""
        buckets = self.all_buckets(samples)
        if len(buckets) <= 1:
            return None
        groups = [buckets.index(s.bucket) for s in samples]
        for g, (f, h, w) in enumerate(buckets):
            n = groups.count(g)
            if 0 < n < world_size:
                log(
                    f"warning: bucket {f}x{h}x{w} has {n} clip(s), fewer than the {world_size} processes; "
                    f"a batch never mixes buckets, so those clips are never trained on"
                )
        return groups
