"""Video data for video diffusion families (their `data_handler`): list clips, screen and bucket them, load pixels.

:func:`~dit_lora.data.prepare.prepare_data` runs the same flow for images and clips (screen,
quarantine, cache, batch); :class:`VideoMedia` is what differs for clips:

* listing: ``--train_data_dir`` through :func:`~dit_lora.data.video_sources.load_video_samples`, or
  ``--dataset_name`` through :func:`load_video_dataset` (clips stored as bytes in the dataset are
  written once, content-addressed, under ``<cache root>/videos/`` so every clip has a file path);
* screening: every clip is decoded once; unreadable, truncated and too-short clips are left out
  and every kept clip gets its (frames, height, width) bucket from ``family.video_buckets(cfg)``;
* pixels: :func:`~dit_lora.data.video.decode_clip` to the clip's bucket, one clip per encode call
  (a 49x480x720 clip through the VAE is already heavy);
* batching: with several buckets, the bucket index of each clip is its batch group.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Callable

import torch

from ..errors import UserError
from ..fileio import write_bytes_atomic
from ..config.parser import check_one_source
from .batches import collate
from .paths import Located
from .hub_datasets import check_dataset_columns, dataset_captions, dataset_files_root, open_dataset, place_dataset_path
from .sources import name_some
from .video import VIDEO_EXTENSIONS, VideoSample, decode_clip, frames_flag_for, validate_video_samples
from .video_sources import load_video_samples

__all__ = ["VideoMedia", "load_video_dataset", "materialise_clip", "video_namespace_identity"]

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


def _suffix(name: str | None) -> str:
    ext = os.path.splitext(name or "")[1].lower()
    return ext if ext in VIDEO_EXTENSIONS else ".mp4"  # FFmpeg probes the content; the suffix is only a hint


def _clip_path(value: Any, base_dir: str, clip_folder: Path, place: Callable[[str], Located]) -> Located | None:
    """The file of one dataset cell: bytes written under ``clip_folder``, a ``Video`` cell's own path (relative
    to ``base_dir``), or a path string placed by ``place`` (refused when it leaves the dataset's files)."""
    if isinstance(value, dict):
        if value.get("bytes"):
            path = str(materialise_clip(bytes(value["bytes"]), clip_folder, _suffix(value.get("path"))))
            return Located(path, path, None)
        path = value.get("path")  # written by `datasets` itself (see hub_datasets.dataset_files_root)
        if isinstance(path, str) and path.strip():
            path = os.path.normpath(path if os.path.isabs(path) else os.path.join(base_dir, path))
            return Located(path, path, None)
        return None
    if isinstance(value, str) and value.strip():
        return place(value)
    return None


def _video_column_hint(dataset: Any, exclude: str) -> str:
    import datasets

    for name, feature in dataset.features.items():
        if name != exclude and isinstance(feature, datasets.Video):
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
) -> list[VideoSample]:
    """List the clips of a `datasets` dataset (its 'train' split) without decoding them.

    The clips are in ``video_column`` (default ``video``): a ``datasets.Video`` column (read with
    ``decode=False``, so neither torchcodec nor decord is needed) or a string column of paths inside
    the dataset's own files (:func:`~dit_lora.data.hub_datasets.dataset_files_root`): relative to the folder of a
    local dataset; a path that leaves them is refused (the clip is quarantined with the reason, never opened).
    Clips stored as bytes are written once to ``clip_folder`` (content-addressed, see :func:`materialise_clip`).
    Keys are ``"<dataset_name>[<row>]"``, order is row order, ``max_train_samples`` keeps the first N rows.

    Raises:
        UserError: the dataset does not load, a missing video or caption column, a column that
            holds neither videos nor paths, rows without a caption or without a clip.
    """
    import datasets  # slow import; only paid when --dataset_name is used

    column = video_column or "video"
    dataset = open_dataset(dataset_name, config_name, cache_dir, what="videos")
    check_dataset_columns(dataset_name, list(dataset.column_names), column, caption_column, what="videos",
                          media_hint=_video_column_hint(dataset, caption_column))
    if max_train_samples is not None and max_train_samples < len(dataset):
        dataset = dataset.select(range(max_train_samples))
    feature = dataset.features[column]
    videos = dataset.select_columns([column])
    if isinstance(feature, datasets.Video):
        videos = videos.cast_column(column, datasets.Video(decode=False))  # {"path", "bytes"}: no decoder needed
    elif not (isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")):
        raise UserError(
            f"Column {column!r} of --dataset_name {dataset_name!r} holds {feature!r}, not videos or video "
            f"paths. Pass --video_column with the column of videos "
            f"(columns: {', '.join(map(repr, dataset.column_names))})."
        )
    base_dir = dataset_name if os.path.isdir(dataset_name) else os.getcwd()
    root = dataset_files_root(dataset_name) if not isinstance(feature, datasets.Video) else None
    captions = dataset_captions(dataset, dataset_name, caption_column)
    paths: list[Located | None] = []
    for start in range(0, len(videos), _ROWS_PER_READ):
        for value in videos[start : start + _ROWS_PER_READ][column]:
            field = f"row {len(paths)}: {column}"
            paths.append(_clip_path(value, base_dir, Path(clip_folder),
                                    lambda text: place_dataset_path(root, dataset_name, text, field)))
    empty = [f"{dataset_name}[{row}]" for row, path in enumerate(paths) if path is None]
    if empty:
        raise UserError(
            f"{len(empty)} row(s) of --dataset_name {dataset_name!r} have no video in column {column!r}: "
            f"{name_some(empty)}. Fill them in, drop those rows, or pick another --video_column."
        )
    # A refused row keeps its written path as its path (never opened): screening quarantines it with the reason.
    return [VideoSample(key=f"{dataset_name}[{row}]", caption=caption, index=i,
                        path=paths[row].path or paths[row].key, refused=paths[row].refused)  # type: ignore[union-attr]
            for i, (row, caption) in enumerate(captions)]


def video_namespace_identity(cfg, family, comps=None) -> dict[str, Any]:
    """What besides the clip and its bucket shapes a cached video entry (the cache namespace's identity).

    No image ``resolution``: each entry's name carries its bucket, so changing frames or sizes
    re-encodes only the clips whose bucket changed. Frames are always centre-cropped (no crop seed).
    """
    return {**family.cache_identity(cfg, comps), "media": "video", "frame_sampling": cfg.frame_sampling,
            "random_flip": cfg.random_flip, "crop": "center"}


class VideoMedia:
    """What :func:`~dit_lora.data.prepare.prepare_data` and ``check-data`` do differently for clips."""

    noun = "clip"
    cacheable = True
    encode_batch_size = 1  # one clip per VAE call: memory, not throughput, limits video encoding
    collate = staticmethod(collate)

    def __init__(self, cfg, family, cache_root: Path) -> None:
        from ..families import capabilities as caps

        # Clips need a family that encodes them (Encoders), buckets them (VideoFrames) and says about captions.
        caps.require(family, caps.Encoders, "Video data")
        caps.require(family, caps.VideoFrames, "Video data")
        self.requires_captions = caps.requires_captions(family)
        self.cfg, self.family, self.cache_root = cfg, family, Path(cache_root)
        self._buckets: list[tuple[int, int, int]] | None = None

    @property
    def buckets(self) -> list[tuple[int, int, int]]:
        """The family's validated (frames, height, width) buckets for this config."""
        if self._buckets is None:
            self._buckets = [tuple(b) for b in self.family.video_buckets(self.cfg)]  # type: ignore[misc]
        return self._buckets  # type: ignore[return-value]

    @property
    def frames_flag(self) -> str:
        """The option a too-short clip is measured against, as reasons and errors name it."""
        return frames_flag_for(self.buckets, from_buckets=bool(self.cfg.frame_buckets))

    def list_samples(self) -> list[VideoSample]:
        """The clips of ``--train_data_dir`` or ``--dataset_name``, not decoded yet."""
        cfg = self.cfg
        check_one_source(cfg.train_data_dir, cfg.dataset_name, "videos with metadata.jsonl or prompts.txt + videos.txt")
        if cfg.train_data_dir is not None:
            return load_video_samples(cfg.train_data_dir, cfg.caption_column, cfg.video_column, cfg.max_train_samples)
        if cfg.max_train_samples is not None and cfg.max_train_samples < 1:
            raise UserError(f"--max_train_samples must be a positive whole number, got {cfg.max_train_samples!r}.")
        return load_video_dataset(
            cfg.dataset_name, cfg.dataset_config_name, video_column=cfg.video_column,
            caption_column=cfg.caption_column, max_train_samples=cfg.max_train_samples,
            clip_folder=self.cache_root / "videos",
        )

    def screen(self, samples: list, *, log: Callable[[str], Any], quarantine: list[dict[str, Any]]) -> list:
        """Decode every clip once, leave out the bad and too-short ones, give the others their bucket."""
        good = validate_video_samples(
            samples, buckets=self.buckets, frames_flag=self.frames_flag,
            max_bad_samples_fraction=self.cfg.max_bad_samples_fraction, log=log, quarantine=quarantine,
            require_captions=self.requires_captions, raise_on_fraction=False,
        )
        if len(self.buckets) > 1:
            counts = {b: 0 for b in self.buckets}
            for s in good:
                counts[s.bucket] += 1
            log("clips per bucket: " + ", ".join(f"{f}x{h}x{w}: {n}" for (f, h, w), n in counts.items()))
        return good

    def check(self, samples: list, *, log: Callable[[str], Any]) -> tuple[list, list, str | None]:
        """``check-data``: every clip decoded to its bucket as training would; (rows, usable clips, note)."""
        from . import preflight

        shown = ", ".join(f"{f}x{h}x{w}" for f, h, w in self.buckets)
        log(f"checking {len(samples)} clip(s) for bucket(s) {shown} (frames x height x width) ...")
        rows, usable = preflight.check_video_samples(
            samples, buckets=self.buckets, frame_sampling=self.cfg.frame_sampling, frames_flag=self.frames_flag,
            require_captions=self.requires_captions)
        from .prepare import report_captions

        report_captions(samples, self.cfg, self.family, log)
        return rows, usable, None

    def namespace_identity(self, comps=None) -> dict[str, Any]:
        return video_namespace_identity(self.cfg, self.family, comps)

    def pixel_loader(self, samples: list) -> Callable[[int], torch.Tensor]:
        """``i -> (F, 3, H, W)`` pixels of clip ``i`` at its bucket, frames picked per --frame_sampling."""
        def load(i: int) -> torch.Tensor:
            frames, height, width = samples[i].bucket
            return decode_clip(samples[i].path, frames, height, width, start=self.cfg.frame_sampling)

        return load

    def raw_dataset(self, samples: list):
        from .batches import RawVideoDataset

        return RawVideoDataset(samples, self.cfg.frame_sampling)

    def groups(self, samples: list, *, world_size: int = 1, log: Callable[[str], Any] = print) -> list[int] | None:
        """Bucket index of every clip (batches never mix buckets), or None with a single bucket."""
        if len(self.buckets) <= 1:
            return None
        groups = [self.buckets.index(s.bucket) for s in samples]
        for g, (f, h, w) in enumerate(self.buckets):
            n = groups.count(g)
            if 0 < n < world_size:
                log(f"warning: bucket {f}x{h}x{w} has {n} clip(s), fewer than the {world_size} processes; "
                    f"a batch never mixes buckets, so those clips are never trained on")
        return groups
